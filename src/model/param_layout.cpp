#include "model/param_layout.h"

namespace llmrun {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

namespace {

class BucketBuilder {
 public:
  explicit BucketBuilder(std::string name) { b_.name = std::move(name); }
  BucketBuilder& add(std::string hf_name, std::vector<int64_t> shape, ParamInit init,
                     bool hf_transposed = false) {
    ParamSpec p;
    p.hf_name = std::move(hf_name);
    p.shape = std::move(shape);
    p.offset = b_.numel;
    p.init = init;
    p.decay = p.shape.size() >= 2;
    p.hf_transposed = hf_transposed;
    b_.numel += p.numel();
    b_.params.push_back(std::move(p));
    return *this;
  }
  BucketLayout done() { return std::move(b_); }

 private:
  BucketLayout b_;
};

constexpr auto kNormal = ParamInit::normal;
constexpr auto kResidual = ParamInit::residual_normal;
constexpr auto kOnes = ParamInit::ones;
constexpr auto kZeros = ParamInit::zeros;

BucketLayout gpt2_block(const ModelConfig& c, int i) {
  const int64_t d = c.d_model, f = c.ffn;
  const std::string p = "transformer.h." + std::to_string(i) + ".";
  return BucketBuilder("block." + std::to_string(i))
      .add(p + "ln_1.weight", {d}, kOnes)
      .add(p + "ln_1.bias", {d}, kZeros)
      .add(p + "attn.c_attn.weight", {3 * d, d}, kNormal, true)
      .add(p + "attn.c_attn.bias", {3 * d}, kZeros)
      .add(p + "attn.c_proj.weight", {d, d}, kResidual, true)
      .add(p + "attn.c_proj.bias", {d}, kZeros)
      .add(p + "ln_2.weight", {d}, kOnes)
      .add(p + "ln_2.bias", {d}, kZeros)
      .add(p + "mlp.c_fc.weight", {f, d}, kNormal, true)
      .add(p + "mlp.c_fc.bias", {f}, kZeros)
      .add(p + "mlp.c_proj.weight", {d, f}, kResidual, true)
      .add(p + "mlp.c_proj.bias", {d}, kZeros)
      .done();
}

BucketLayout llama_block(const ModelConfig& c, int i) {
  const int64_t d = c.d_model, f = c.ffn, hd = c.head_dim();
  const std::string p = "model.layers." + std::to_string(i) + ".";
  return BucketBuilder("block." + std::to_string(i))
      .add(p + "input_layernorm.weight", {d}, kOnes)
      .add(p + "self_attn.q_proj.weight", {c.heads * hd, d}, kNormal)
      .add(p + "self_attn.k_proj.weight", {c.kv_heads * hd, d}, kNormal)
      .add(p + "self_attn.v_proj.weight", {c.kv_heads * hd, d}, kNormal)
      .add(p + "self_attn.o_proj.weight", {d, c.heads * hd}, kResidual)
      .add(p + "post_attention_layernorm.weight", {d}, kOnes)
      .add(p + "mlp.gate_proj.weight", {f, d}, kNormal)
      .add(p + "mlp.up_proj.weight", {f, d}, kNormal)
      .add(p + "mlp.down_proj.weight", {d, f}, kResidual)
      .done();
}

}  // namespace

std::vector<BucketLayout> model_layout(const ModelConfig& c) {
  const int64_t d = c.d_model, v = c.vocab;
  std::vector<BucketLayout> buckets;
  if (c.arch == Arch::gpt2) {
    buckets.push_back(BucketBuilder("embedding")
                          .add("transformer.wte.weight", {v, d}, kNormal)
                          .add("transformer.wpe.weight", {c.seq_len, d}, kNormal)
                          .done());
  } else {
    buckets.push_back(BucketBuilder("embedding").add("model.embed_tokens.weight", {v, d}, kNormal).done());
  }
  for (int i = 0; i < c.layers; ++i)
    buckets.push_back(c.arch == Arch::gpt2 ? gpt2_block(c, i) : llama_block(c, i));
  BucketBuilder head("head");
  if (c.arch == Arch::gpt2) {
    head.add("transformer.ln_f.weight", {d}, kOnes).add("transformer.ln_f.bias", {d}, kZeros);
  } else {
    head.add("model.norm.weight", {d}, kOnes);
  }
  if (!c.tie_embeddings) head.add("lm_head.weight", {v, d}, kNormal);
  buckets.push_back(head.done());
  return buckets;
}

}  // namespace llmrun
