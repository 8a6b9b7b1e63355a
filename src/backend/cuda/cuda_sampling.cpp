// Sampling on the device (Backend::sample_rows): the rows' parameters go up, each row is
// sorted and sampled by kernels/sampling.cuh, and only the ids stay behind for the caller to
// read. The draw is sampling_math.cuh's, which walks the sorted row as TokenSampler does.
#include <cuda_runtime.h>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "kernels/sampling.cuh"

namespace llmrun {

bool CudaBackend::sample_rows(Tensor ids, const Tensor& logits,
                              const std::vector<RowSample>& rows) {
  if (rows.empty()) return true;  // the question "does this backend sample?"
  const float* lp = cuda::dev_f32(logits, "sample_rows logits");
  int32_t* ip = cuda::dev_i32(ids, "sample_rows ids");
  const int64_t n = logits.rows(), vocab = logits.cols();
  LLMRUN_CHECK(int64_t(rows.size()) == n && ids.numel() == n,
               "sample_rows: " + std::to_string(rows.size()) + " parameter rows and ids " +
                   ids.shape_str() + " for logits " + logits.shape_str());
  std::vector<kernels::RowSampling> params(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    LLMRUN_CHECK(rows[r].temperature > 0.0f, "sample_rows: temperature must be positive");
    params[r] = {rows[r].temperature, rows[r].top_k, rows[r].top_p, rows[r].min_p, rows[r].u};
  }
  Buffer dev_params = scratch(params.size() * sizeof(kernels::RowSampling), "sample_rows params");
  // From pageable memory: the copy has left `params` when cudaMemcpyAsync returns.
  cuda::check(cudaMemcpyAsync(dev_params.data(), params.data(),
                              params.size() * sizeof(kernels::RowSampling), cudaMemcpyHostToDevice,
                              stream_),
              "sample_rows params");
  const size_t bytes = kernels::sample_rows_workspace_bytes(int(n), int(vocab));
  Buffer ws = scratch(bytes, "sample_rows workspace");
  kernels::sample_rows(ip, lp, int(n), int(vocab),
                       static_cast<const kernels::RowSampling*>(dev_params.data()), ws.data(),
                       bytes, stream_);
  cuda::check_launch("sample_rows");
  return true;
}

}  // namespace llmrun
