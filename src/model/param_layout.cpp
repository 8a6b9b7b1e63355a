#include "model/param_layout.h"

#include <algorithm>

namespace llmrun {

int64_t ParamSpec::numel() const {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  return n;
}

int64_t ParamSpec::full_numel() const {
  int64_t n = 1;
  for (int64_t s : full_shape) n *= s;
  return n;
}

ModelConfig tp_block_config(const ModelConfig& cfg, int tp) {
  ModelConfig c = cfg;
  c.fixed_head_dim = cfg.head_dim();
  c.heads = cfg.heads / tp;
  c.kv_heads = cfg.kv_heads >= tp ? cfg.kv_heads / tp : 1;
  c.ffn = cfg.ffn / tp;
  return c;
}

std::pair<int64_t, int64_t> vocab_range(int64_t vocab, int tp, int rank) {
  // The first vocab % tp ranks hold one row more.
  const int64_t base = vocab / tp, extra = vocab % tp;
  const int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

namespace {

using Ranges = std::vector<std::pair<int64_t, int64_t>>;

// How a tensor splits across tensor-parallel ranks.
struct Split {
  int axis = 0;
  Ranges ranges;  // empty: the whole tensor (replicated on every rank)
  int replicas = 1;
  bool grad_partial = false;
};

class BucketBuilder {
 public:
  explicit BucketBuilder(std::string name) { b_.name = std::move(name); }
  BucketBuilder& add(std::string hf_name, std::vector<int64_t> full, ParamInit init,
                     const Split& split, bool hf_transposed = false) {
    ParamSpec p;
    p.hf_name = std::move(hf_name);
    p.full_shape = full;
    p.shape = full;
    p.shard.axis = split.axis;
    p.shard.replicas = split.replicas;
    p.shard.grad_partial = split.grad_partial;
    p.shard.ranges = split.ranges.empty() ? Ranges{{0, full[size_t(split.axis)]}} : split.ranges;
    int64_t extent = 0;
    for (auto [lo, hi] : p.shard.ranges) extent += hi - lo;
    p.shape[size_t(split.axis)] = extent;
    p.offset = b_.numel;
    p.init = init;
    p.decay = p.shape.size() >= 2;
    p.hf_transposed = hf_transposed;
    b_.numel += p.numel();
    b_.params.push_back(std::move(p));
    return *this;
  }
  // Marks the tensors added since the builder held `first` tensors as routed experts' tensors.
  BucketBuilder& experts_from(size_t first) {
    for (size_t i = first; i < b_.params.size(); ++i) b_.params[i].expert = true;
    return *this;
  }
  size_t count() const { return b_.params.size(); }
  BucketLayout done() { return std::move(b_); }

 private:
  BucketLayout b_;
};

constexpr auto kNormal = ParamInit::normal;
constexpr auto kResidual = ParamInit::residual_normal;
constexpr auto kOnes = ParamInit::ones;
constexpr auto kZeros = ParamInit::zeros;

// The splits of one rank: column-parallel weights take a slice of their output rows,
// row-parallel ones a slice of their input columns; the rest is replicated.
class Splits {
 public:
  Splits(const ModelConfig& c, const ModelShard& s) : c_(c), s_(s) {}
  // `parts` equal blocks of `rows` rows each, this rank's 1/tp of every block (fused q|k|v).
  Split column(int64_t rows, int parts = 1) const {
    Split sp;
    const int64_t slice = rows / s_.tp;
    for (int p = 0; p < parts; ++p)
      sp.ranges.push_back({p * rows + s_.tp_rank * slice, p * rows + (s_.tp_rank + 1) * slice});
    return sp;
  }
  Split row(int64_t cols) const {
    Split sp = column(cols);
    sp.axis = 1;
    return sp;
  }
  // Key/value heads: split like the query heads, or each rank holds one head shared by
  // tp / kv_heads ranks, whose gradients then add up across them.
  Split kv_heads() const {
    const int64_t hd = c_.head_dim();
    if (c_.kv_heads >= s_.tp) return column(c_.kv_heads * hd);
    Split sp;
    const int64_t head = int64_t(s_.tp_rank) * c_.kv_heads / s_.tp;
    sp.ranges = {{head * hd, (head + 1) * hd}};
    sp.replicas = s_.tp / c_.kv_heads;
    sp.grad_partial = sp.replicas > 1;
    return sp;
  }
  // Norm weights, row-parallel biases, the position table: whole on every rank. With
  // sequence parallelism each rank sees only its tokens, so their gradients are partial.
  Split replicated() const {
    Split sp;
    sp.replicas = s_.tp;
    sp.grad_partial = s_.sequence_parallel && s_.tp > 1;
    return sp;
  }
  // Row-parallel biases: added once to the summed output, and their gradient comes from the
  // whole output gradient, which every rank has (gathered under sequence parallelism).
  Split replicated_whole_grad() const {
    Split sp;
    sp.replicas = s_.tp;
    return sp;
  }
  // Phi-3's fused q|k|v rows: this rank's query heads, then its key and value heads (split,
  // never replicated: one tensor cannot be partly replicated; layout_problem refuses tp >
  // kv_heads).
  Split fused_qkv() const {
    const int64_t q = int64_t(c_.heads) * c_.head_dim(), kv = int64_t(c_.kv_heads) * c_.head_dim();
    const int64_t qs = q / s_.tp, kvs = kv / s_.tp, r = s_.tp_rank;
    Split sp;
    sp.ranges = {{r * qs, (r + 1) * qs},
                 {q + r * kvs, q + (r + 1) * kvs},
                 {q + kv + r * kvs, q + kv + (r + 1) * kvs}};
    return sp;
  }
  // The experts [first, end) of an MoE layer this rank holds (expert parallelism).
  std::pair<int, int> experts(int count) const {
    const int local = count / s_.ep;
    return {s_.ep_rank * local, (s_.ep_rank + 1) * local};
  }
  Split vocab() const {
    Split sp;
    sp.ranges = {vocab_range(c_.vocab, s_.tp, s_.tp_rank)};
    return sp;
  }

 private:
  const ModelConfig& c_;
  const ModelShard& s_;
};

BucketLayout gpt2_block(const ModelConfig& c, const Splits& s, int i) {
  const int64_t d = c.d_model, f = c.ffn;
  const std::string p = "transformer.h." + std::to_string(i) + ".";
  return BucketBuilder("block." + std::to_string(i))
      .add(p + "ln_1.weight", {d}, kOnes, s.replicated())
      .add(p + "ln_1.bias", {d}, kZeros, s.replicated())
      .add(p + "attn.c_attn.weight", {3 * d, d}, kNormal, s.column(d, 3), true)
      .add(p + "attn.c_attn.bias", {3 * d}, kZeros, s.column(d, 3))
      .add(p + "attn.c_proj.weight", {d, d}, kResidual, s.row(d), true)
      .add(p + "attn.c_proj.bias", {d}, kZeros, s.replicated_whole_grad())
      .add(p + "ln_2.weight", {d}, kOnes, s.replicated())
      .add(p + "ln_2.bias", {d}, kZeros, s.replicated())
      .add(p + "mlp.c_fc.weight", {f, d}, kNormal, s.column(f), true)
      .add(p + "mlp.c_fc.bias", {f}, kZeros, s.column(f))
      .add(p + "mlp.c_proj.weight", {d, f}, kResidual, s.row(f), true)
      .add(p + "mlp.c_proj.bias", {d}, kZeros, s.replicated_whole_grad())
      .done();
}

// A mixture-of-experts MLP: the router, each expert's gate, up and down projections (gate and
// up adjacent: one [2 f, d] GEMM operand), then the shared expert and its gate. Named as
// Mixtral's block_sparse_moe without shared experts, as Qwen2-MoE's mlp with them (and OLMoE's).
// Under tensor parallelism the layer runs whole on every tp rank, so every tensor is whole. Under
// expert parallelism the layer holds only this rank's experts (the router stays whole).
BucketBuilder& moe_mlp(BucketBuilder& b, const ModelConfig& c, const Splits& s,
                       const std::string& p) {
  const MoeConfig& m = c.moe;
  const int64_t d = c.d_model, f = m.expert_ffn, fs = m.shared_width();
  const bool mixtral = fs == 0 && !c.qk_norm;  // OLMoE names its experts as Qwen2-MoE does
  const std::string moe = p + (mixtral ? "block_sparse_moe." : "mlp.");
  b.add(moe + "gate.weight", {m.experts, d}, kNormal, s.replicated());
  const auto [first_expert, end_expert] = s.experts(m.experts);
  const size_t expert_tensors = b.count();
  for (int e = first_expert; e < end_expert; ++e) {
    const std::string x = moe + "experts." + std::to_string(e) + ".";
    b.add(x + (mixtral ? "w1" : "gate_proj") + ".weight", {f, d}, kNormal, s.replicated())
        .add(x + (mixtral ? "w3" : "up_proj") + ".weight", {f, d}, kNormal, s.replicated())
        .add(x + (mixtral ? "w2" : "down_proj") + ".weight", {d, f}, kResidual, s.replicated());
  }
  b.experts_from(expert_tensors);
  if (fs > 0)
    b.add(moe + "shared_expert.gate_proj.weight", {fs, d}, kNormal, s.replicated())
        .add(moe + "shared_expert.up_proj.weight", {fs, d}, kNormal, s.replicated())
        .add(moe + "shared_expert.down_proj.weight", {d, fs}, kResidual, s.replicated())
        .add(moe + "shared_expert_gate.weight", {1, d}, kNormal, s.replicated());
  return b;
}

BucketLayout llama_block(const ModelConfig& c, const Splits& s, int i) {
  const int64_t d = c.d_model, f = c.ffn, hd = c.head_dim();
  const std::string p = "model.layers." + std::to_string(i) + ".";
  BucketBuilder b("block." + std::to_string(i));
  if (c.phi3)  // the same tensors as below, under Phi-3's fused names (and so one bucket order)
    return b.add(p + "input_layernorm.weight", {d}, kOnes, s.replicated())
        .add(p + "self_attn.qkv_proj.weight", {(c.heads + 2 * c.kv_heads) * hd, d}, kNormal,
             s.fused_qkv())
        .add(p + "self_attn.o_proj.weight", {d, c.heads * hd}, kResidual, s.row(c.heads * hd))
        .add(p + "post_attention_layernorm.weight", {d}, kOnes, s.replicated())
        .add(p + "mlp.gate_up_proj.weight", {2 * f, d}, kNormal, s.column(f, 2))
        .add(p + "mlp.down_proj.weight", {d, f}, kResidual, s.row(f))
        .done();
  b.add(p + "input_layernorm.weight", {d}, kOnes, s.replicated())
      .add(p + "self_attn.q_proj.weight", {c.heads * hd, d}, kNormal, s.column(c.heads * hd))
      .add(p + "self_attn.k_proj.weight", {c.kv_heads * hd, d}, kNormal, s.kv_heads())
      .add(p + "self_attn.v_proj.weight", {c.kv_heads * hd, d}, kNormal, s.kv_heads());
  if (c.qkv_bias)  // split like their weights' rows; block_tensors reads them as one q|k|v bias
    b.add(p + "self_attn.q_proj.bias", {c.heads * hd}, kZeros, s.column(c.heads * hd))
        .add(p + "self_attn.k_proj.bias", {c.kv_heads * hd}, kZeros, s.kv_heads())
        .add(p + "self_attn.v_proj.bias", {c.kv_heads * hd}, kZeros, s.kv_heads());
  if (c.qk_norm)  // OLMoE: whole (tensor parallelism is refused with q/k norms)
    b.add(p + "self_attn.q_norm.weight", {c.heads * hd}, kOnes, s.replicated())
        .add(p + "self_attn.k_norm.weight", {c.kv_heads * hd}, kOnes, s.replicated());
  b.add(p + "self_attn.o_proj.weight", {d, c.heads * hd}, kResidual, s.row(c.heads * hd))
      .add(p + "post_attention_layernorm.weight", {d}, kOnes, s.replicated());
  if (c.moe.layer_is_moe(i)) return moe_mlp(b, c, s, p).done();
  return b.add(p + "mlp.gate_proj.weight", {f, d}, kNormal, s.column(f))
      .add(p + "mlp.up_proj.weight", {f, d}, kNormal, s.column(f))
      .add(p + "mlp.down_proj.weight", {d, f}, kResidual, s.row(f))
      .done();
}

}  // namespace

std::vector<BucketLayout> model_layout(const ModelConfig& c, const ModelShard& shard) {
  const int64_t d = c.d_model, v = c.vocab;
  const Splits s(c, shard);
  const bool gpt2 = c.arch == Arch::gpt2;
  const std::string token_table = gpt2 ? "transformer.wte.weight" : "model.embed_tokens.weight";
  std::vector<BucketLayout> buckets;
  BucketBuilder embedding("embedding");
  if (shard.embedding) {
    embedding.add(token_table, {v, d}, kNormal, s.vocab());
    if (gpt2) embedding.add("transformer.wpe.weight", {c.seq_len, d}, kNormal, s.replicated());
  }
  buckets.push_back(embedding.done());
  for (int i = 0; i < c.layers; ++i) {
    if (shard.holds_layer(i))
      buckets.push_back(gpt2 ? gpt2_block(c, s, i) : llama_block(c, s, i));
    else
      buckets.push_back(BucketBuilder("block." + std::to_string(i)).done());
  }
  BucketBuilder head("head");
  if (shard.head) {
    if (gpt2)
      head.add("transformer.ln_f.weight", {d}, kOnes, s.replicated())
          .add("transformer.ln_f.bias", {d}, kZeros, s.replicated());
    else
      head.add("model.norm.weight", {d}, kOnes, s.replicated());
    if (!c.tie_embeddings) head.add("lm_head.weight", {v, d}, kNormal, s.vocab());
  }
  BucketLayout head_bucket = head.done();
  if (shard.head && c.tie_embeddings && !shard.embedding) {
    // A pipeline's last stage without the embedding keeps its own copy of the tied table.
    BucketBuilder copy("head");
    for (ParamSpec& p : head_bucket.params)
      copy.add(p.hf_name, p.full_shape, p.init, s.replicated());
    head_bucket = copy.add(token_table, {v, d}, kNormal, s.vocab()).done();
    head_bucket.params.back().tied_copy = true;
  }
  buckets.push_back(std::move(head_bucket));
  return buckets;
}

}  // namespace llmrun
