// The CUDA backend: every Backend op on one device, enqueued on the device's compute stream.
// The op families live in separate files mirroring src/backend/cpu/: cuda_backend.cpp (memory,
// copies, casts, reductions), cuda_gemm.cpp (cuBLASLt matmul, the batch-invariant linear),
// cuda_elementwise.cpp, cuda_norms.cpp, cuda_rope.cpp, cuda_attention.cpp (training, cached and
// paged attention), cuda_attention_block.cpp (context parallelism's ring attention blocks),
// cuda_embedding.cpp, cuda_loss.cpp and cuda_adamw.cpp. Kernels and their launchers are in
// kernels/ at the top of the repository.
//
// Tensors handed to the ops must live on this device (Device::cuda) except in copy/copy_cols,
// which move data between host and device in both directions.
#pragma once
#include <map>
#include <tuple>

#include "backend/backend.h"
#include "backend/cuda/cuda_context.h"
#include "backend/cuda/cuda_upload_ring.h"
#include "backend/device_streams.h"
#include "backend/fp8_gemm.h"

namespace llmrun {

// Also the FP8 GEMMs (cuda_fp8.cpp) on devices with FP8 tensor cores, and its compute stream
// for the NCCL communicator's event ordering.
class CudaBackend final : public Backend, public Fp8GemmOps, public DeviceStreams {
 public:
  explicit CudaBackend(int ordinal);

  std::string name() const override { return "cuda"; }
  Device device() const override { return Device::cuda; }
  int threads() const override { return sm_count_; }

  Buffer allocate(size_t bytes) override;
  void copy(Tensor dst, const Tensor& src) override;
  void fill(Tensor x, float value) override;
  void copy_cols(Tensor dst, const Tensor& src, int64_t col_begin) override;
  void copy_into_cols(Tensor dst, const Tensor& src, int64_t col_begin) override;
  void cast(Tensor dst, const Tensor& src, float scale = 1.0f) override;

  void matmul(Tensor out, const Tensor& a, const Tensor& b, bool trans_a, bool trans_b,
              float alpha = 1.0f, float beta = 0.0f, const Tensor* bias = nullptr) override;
  void linear_rows(Tensor y, const Tensor& x, const Tensor& W, const Tensor* bias,
                   bool accumulate) override;
  void sum_rows(Tensor out, const Tensor& x, bool accumulate) override;
  // cuBLASLt's GELU_AUX(_BIAS) and DGELU epilogues (cuda_gemm.cpp); the unfused default when
  // the heuristic or the alignment rules them out.
  void matmul_bias_gelu(Tensor pre, Tensor act, const Tensor& x, const Tensor& W,
                        const Tensor* bias) override;
  void matmul_dgelu(Tensor dx, const Tensor& dy, const Tensor& W, const Tensor& pre) override;
  void linear_grads(Tensor dx, Tensor dW, const Tensor& dy, const Tensor& x,
                    const Tensor& W) override;
  // kernels/sampling.cuh: sort each row on the device and sample it there (cuda_sampling.cpp).
  bool sample_rows(Tensor ids, const Tensor& logits, const std::vector<RowSample>& rows) override;

  void add(Tensor out, const Tensor& a, const Tensor& b) override;
  void scale(Tensor x, float a) override;
  void gelu_fwd(Tensor out, const Tensor& x) override;
  void gelu_bwd(Tensor dx, const Tensor& dy, const Tensor& x) override;
  void swiglu_fwd(Tensor out, const Tensor& gate_up) override;
  void swiglu_bwd(Tensor dgate_up, const Tensor& dout, const Tensor& gate_up) override;

  void layernorm_fwd(Tensor out, Tensor mean, Tensor rstd, const Tensor& x, const Tensor& w,
                     const Tensor& b, float eps) override;
  void layernorm_bwd(Tensor dx, Tensor dw, Tensor db, const Tensor& dy, const Tensor& x,
                     const Tensor& w, const Tensor& mean, const Tensor& rstd,
                     bool accumulate_dx) override;
  void rmsnorm_fwd(Tensor out, Tensor rstd, const Tensor& x, const Tensor& w, float eps) override;
  void rmsnorm_bwd(Tensor dx, Tensor dw, const Tensor& dy, const Tensor& x, const Tensor& w,
                   const Tensor& rstd, bool accumulate_dx) override;

  void rope(Tensor x, const Tensor& positions, int rotated_heads, int head_dim, float theta,
            const RopeScaling& scaling, bool inverse) override;
  void attention_fwd(Tensor out, Tensor lse, const Tensor& qkv, const AttentionShape& s) override;
  void attention_bwd(Tensor dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                     const Tensor& lse, const AttentionShape& s) override;
  void attention_cached(Tensor out, const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                        int start_pos, int heads, int kv_heads, int head_dim) override;
  void paged_attention(Tensor out, const Tensor& q, const Tensor& k_pool, const Tensor& v_pool,
                       const Tensor& block_tables, const Tensor& query_starts,
                       const Tensor& context_lens, int block_size, int heads, int kv_heads,
                       int head_dim) override;
  void scatter_rows(Tensor dst, const Tensor& src, const Tensor& slots, int64_t col_begin) override;
  // Context parallelism's ring attention blocks (cuda_attention_block.cpp).
  void attention_block_fwd(Tensor out, Tensor lse, const Tensor& q, const Tensor& k,
                           const Tensor& v, int nk, bool causal, const AttentionShape& s) override;
  void attention_lse_merge(Tensor out, Tensor lse, const Tensor& block_out, const Tensor& block_lse,
                           const AttentionShape& s) override;
  void attention_block_bwd(Tensor dq, Tensor dk, Tensor dv, const Tensor& dout, const Tensor& out,
                           const Tensor& lse, const Tensor& q, const Tensor& k, const Tensor& v,
                           int nk, bool causal, const AttentionShape& s) override;

  void embedding_fwd(Tensor out, const Tensor& ids, const Tensor& table, bool accumulate) override;
  void embedding_bwd(Tensor dtable, const Tensor& dout, const Tensor& ids) override;
  void softmax_xent(Tensor losses, Tensor logits, const Tensor& targets, float grad_scale) override;
  void xent_row_max(Tensor row_max, const Tensor& logits) override;
  void xent_partials(Tensor sums, const Tensor& logits, const Tensor& row_max,
                     const Tensor& targets) override;
  void xent_finish(Tensor losses, Tensor logits, const Tensor& row_max, const Tensor& sums,
                   const Tensor& targets, float grad_scale) override;

  void adamw(Tensor params, const Tensor& grads, Tensor m, Tensor v,
             const AdamWParams& hp) override;
  double sum_squares(const Tensor& x) override;
  double sum(const Tensor& x) override;
  float amax(const Tensor& x) override;
  void sum_squares_into(Tensor out, const Tensor& x) override;
  void amax_into(Tensor out, const Tensor& x) override;
  void argmax_rows(Tensor ids, const Tensor& x) override;
  Buffer allocate_host_pinned(size_t bytes) override;
  void synchronize() override;

  void* compute_stream() const override { return stream_; }
  int device_ordinal() const override { return ctx_.ordinal; }
  // A copy stream of its own beside the compute stream (cuda_copy_stream.cpp).
  std::unique_ptr<CopyStream> make_copy_stream() override;

  std::string fp8_unsupported() const override;
  bool fp8_shape_supported(int64_t m, int64_t n, int64_t k) const override;
  void fp8_cast_transpose(Tensor q, Tensor qt, Tensor amax, Tensor counts, const Tensor& x,
                          const Tensor& scale, DType format) override;
  void fp8_matmul(Tensor out, const Tensor& a, const Tensor& b, const Tensor& a_scale_inv,
                  const Tensor& b_scale_inv, float beta, const Tensor* bias) override;

 private:
  // Device memory for this op only, not zeroed; freed (into the cache) when the Buffer goes,
  // which is safe while the op's kernels are still queued (stream order, caching_allocator.h).
  Buffer scratch(size_t bytes, const char* what);
  Buffer allocate_raw(size_t bytes, const std::string& what);
  // f32 view of a device tensor with its data in bf16 (round to nearest even): GEMM operands.
  Buffer to_bf16(const Tensor& t, const char* what);
  // t's data as a GEMM operand of gemm_dtype(): t itself in f32, else rounded into `rounded`.
  const void* gemm_operand(const Tensor& t, Buffer& rounded, const char* what);
  // matmul with a and b already turned into operands (a_op, b_op) by gemm_operand.
  void gemm(Tensor out, const Tensor& a, const Tensor& b, const void* a_op, const void* b_op,
            bool trans_a, bool trans_b, float alpha, float beta, const Tensor* bias);
  // Runs a whole-tensor reduction into a fresh device double and returns it to the host.
  double reduce_to_host(int op, const Tensor& x, const char* what);
  const float* rope_frequencies(float theta, int head_dim, const RopeScaling& s);

  cuda::DeviceContext& ctx_;
  cudaStream_t stream_;
  int sm_count_ = 0;
  int max_optin_smem_ = 0;             // dynamic shared memory per block with the opt-in attribute
  cuda::UploadRing uploads_{stream_};  // copy()'s small host-to-device copies
  // inv_freq tables uploaded once per (theta, head_dim, scaling).
  std::map<std::tuple<float, int, int, float, float, float, int>, Buffer> rope_tables_;
};

namespace cuda {

// Argument checks shared by the op files: a device tensor of the given type, named in errors.
float* dev_f32(const Tensor& t, const char* what);
int32_t* dev_i32(const Tensor& t, const char* what);
void check_same_numel(const Tensor& a, const Tensor& b, const char* what);

}  // namespace cuda

}  // namespace llmrun
