// The device-emulating test backend (see the header): address tagging, host<->"device"
// copies, and every other op forwarded to the CPU backend over untagged views.
#include "backend/cpu/emulated_device_backend.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/error.h"

namespace llmrun {

namespace {

// Added to every device address: the result lies outside x86-64's canonical user range (and
// AArch64's 48-bit one), so a host load or store through it faults instead of silently
// reading memory the host could not read on a real device. Offsets (slice, flat, view)
// survive the tag because it is a plain addition.
constexpr uintptr_t kTag = uintptr_t(1) << 62;

void free_tagged(void* p) {
  std::free(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) - kTag));
}

class EmulatedDeviceBackend final : public Backend {
 public:
  explicit EmulatedDeviceBackend(int threads) : cpu_(make_cpu_backend(threads)) {}

  std::string name() const override { return "emulated-device"; }
  Device device() const override { return Device::cuda; }
  int threads() const override { return cpu_->threads(); }

  Buffer allocate(size_t bytes) override {
    const size_t rounded = (bytes + 63) / 64 * 64;
    void* p = std::aligned_alloc(64, rounded == 0 ? 64 : rounded);
    if (!p) throw std::bad_alloc();
    std::memset(p, 0, rounded == 0 ? 64 : rounded);
    return Buffer(reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(p) + kTag), bytes,
                  Device::cuda, &free_tagged);
  }

  // Host and device on either side, like cudaMemcpyDefault.
  void copy(Tensor dst, const Tensor& src) override { cpu_->copy(any(dst), any(src)); }

  void fill(Tensor x, float value) override { cpu_->fill(dev(x), value); }
  void copy_cols(Tensor dst, const Tensor& src, int64_t col_begin) override {
    cpu_->copy_cols(dev(dst), dev(src), col_begin);
  }
  void cast(Tensor dst, const Tensor& src, float scale) override {
    cpu_->cast(dev(dst), dev(src), scale);
  }
  void matmul(Tensor out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b, float alpha,
              float beta, const Tensor* bias) override {
    const Tensor opt = bias ? dev(*bias) : Tensor();
    cpu_->set_gemm_dtype(gemm_dtype());
    cpu_->matmul(dev(out), dev(a), dev(b), trans_a, trans_b, alpha, beta, bias ? &opt : nullptr);
  }
  void linear_rows(Tensor y, const Tensor& x, const Tensor& W, const Tensor* bias,
                   bool accumulate) override {
    const Tensor opt = bias ? dev(*bias) : Tensor();
    cpu_->set_gemm_dtype(gemm_dtype());
    cpu_->linear_rows(dev(y), dev(x), dev(W), bias ? &opt : nullptr, accumulate);
  }
  void sum_rows(Tensor out, const Tensor& x, bool accumulate) override {
    cpu_->sum_rows(dev(out), dev(x), accumulate);
  }
  void add(Tensor out, const Tensor& a, const Tensor& b) override {
    cpu_->add(dev(out), dev(a), dev(b));
  }
  void scale(Tensor x, float a) override { cpu_->scale(dev(x), a); }
  void gelu_fwd(Tensor out, const Tensor& x) override { cpu_->gelu_fwd(dev(out), dev(x)); }
  void gelu_bwd(Tensor dx, const Tensor& dy, const Tensor& x) override {
    cpu_->gelu_bwd(dev(dx), dev(dy), dev(x));
  }
  void swiglu_fwd(Tensor out, const Tensor& gate_up) override {
    cpu_->swiglu_fwd(dev(out), dev(gate_up));
  }
  void swiglu_bwd(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) override {
    cpu_->swiglu_bwd(dev(dgate_up), dev(dout), dev(gate_up));
  }
  void layernorm_fwd(Tensor out, Tensor mean, Tensor rstd, const Tensor& x, const Tensor& w,
                     const Tensor& b, float eps) override {
    cpu_->layernorm_fwd(dev(out), dev(mean), dev(rstd), dev(x), dev(w), dev(b), eps);
  }
  void layernorm_bwd(Tensor dx, Tensor dw, Tensor db, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     bool accumulate_dx) override {
    cpu_->layernorm_bwd(dev(dx), dev(dw), dev(db), dev(dy), dev(x), dev(w), dev(mean), dev(rstd),
                        accumulate_dx);
  }
  void rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, float eps) override {
    cpu_->rmsnorm_fwd(dev(out), dev(rstd), dev(x), dev(w), eps);
  }
  void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& rstd, bool accumulate_dx) override {
    cpu_->rmsnorm_bwd(dev(dx), dev(dw), dev(dy), dev(x), dev(w), dev(rstd), accumulate_dx);
  }
  void rope(Tensor x, const Tensor& positions, int rotated_heads, int head_dim, float theta,
            const RopeScaling& scaling, bool inverse) override {
    cpu_->rope(dev(x), dev(positions), rotated_heads, head_dim, theta, scaling, inverse);
  }
  void attention_fwd(Tensor out, Tensor lse, const Tensor& qkv, const AttentionShape& s) override {
    cpu_->set_gemm_dtype(gemm_dtype());  // bf16 compute rounds attention's operands too
    cpu_->attention_fwd(dev(out), dev(lse), dev(qkv), s);
  }
  void attention_bwd(Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                     const Tensor& lse, const AttentionShape& s) override {
    cpu_->set_gemm_dtype(gemm_dtype());
    cpu_->attention_bwd(dev(dqkv), dev(dout), dev(qkv), dev(out), dev(lse), s);
  }
  void attention_cached(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        int start_pos, int heads, int kv_heads, int head_dim) override {
    cpu_->attention_cached(dev(out), dev(q), dev(k_cache), dev(v_cache), start_pos, heads, kv_heads,
                           head_dim);
  }
  void paged_attention(Tensor out, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                       const Tensor& block_tables, const Tensor& query_starts,
                       const Tensor& context_lens, int block_size, int heads, int kv_heads,
                       int head_dim) override {
    cpu_->paged_attention(dev(out), dev(q), dev(k_pool), dev(v_pool), dev(block_tables),
                          dev(query_starts), dev(context_lens), block_size, heads, kv_heads,
                          head_dim);
  }
  void scatter_rows(Tensor dst, const Tensor& src, const Tensor& slots,
                    int64_t col_begin) override {
    cpu_->scatter_rows(dev(dst), dev(src), dev(slots), col_begin);
  }
  void embedding_fwd(Tensor out, const Tensor& ids, const Tensor& table, bool accumulate) override {
    cpu_->embedding_fwd(dev(out), dev(ids), dev(table), accumulate);
  }
  void embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& ids) override {
    cpu_->embedding_bwd(dev(dtable), dev(dout), dev(ids));
  }
  void softmax_xent(Tensor losses, Tensor logits, const Tensor& targets,
                    float grad_scale) override {
    cpu_->softmax_xent(dev(losses), dev(logits), dev(targets), grad_scale);
  }
  void xent_row_max(Tensor row_max, const Tensor& logits) override {
    cpu_->xent_row_max(dev(row_max), dev(logits));
  }
  void xent_partials(Tensor sums, const Tensor& logits, const Tensor& row_max,
                     const Tensor& targets) override {
    cpu_->xent_partials(dev(sums), dev(logits), dev(row_max), dev(targets));
  }
  void xent_finish(Tensor losses, Tensor logits, const Tensor& row_max, const Tensor& sums,
                   const Tensor& targets, float grad_scale) override {
    cpu_->xent_finish(dev(losses), dev(logits), dev(row_max), dev(sums), dev(targets), grad_scale);
  }
  void adamw(Tensor params, const Tensor& grads, Tensor m, Tensor v,
             const AdamWParams& hp) override {
    cpu_->adamw(dev(params), dev(grads), dev(m), dev(v), hp);
  }
  double sum_squares(const Tensor& x) override { return cpu_->sum_squares(dev(x)); }
  double sum(const Tensor& x) override { return cpu_->sum(dev(x)); }
  float amax(const Tensor& x) override { return cpu_->amax(dev(x)); }
  void sum_squares_into(Tensor out, const Tensor& x) override {
    cpu_->sum_squares_into(dev(out), dev(x));
  }
  void amax_into(Tensor out, const Tensor& x) override { cpu_->amax_into(dev(out), dev(x)); }
  void argmax_rows(Tensor ids, const Tensor& x) override { cpu_->argmax_rows(dev(ids), dev(x)); }

  void synchronize() override { cpu_->synchronize(); }

 private:
  // A device tensor as the host view the CPU backend computes on. Compute ops take device
  // tensors only, as a real device backend would: a host tensor here is a bug above.
  static Tensor dev(const Tensor& t) {
    if (t.data == nullptr) return t;
    LLMRUN_CHECK(t.device == Device::cuda,
                 "emulated-device backend: a compute op was given a host tensor " + t.shape_str());
    return untag(t);
  }
  static Tensor any(const Tensor& t) { return t.device == Device::cuda && t.data ? untag(t) : t; }
  static Tensor untag(Tensor t) {
    const auto a = reinterpret_cast<uintptr_t>(t.data);
    LLMRUN_CHECK(a >= kTag, "emulated-device backend: a Device::cuda tensor it did not allocate");
    t.data = reinterpret_cast<void*>(a - kTag);
    t.device = Device::cpu;
    return t;
  }

  std::unique_ptr<Backend> cpu_;
};

}  // namespace

std::unique_ptr<Backend> make_emulated_device_backend(int threads) {
  return std::make_unique<EmulatedDeviceBackend>(threads);
}

}  // namespace llmrun
