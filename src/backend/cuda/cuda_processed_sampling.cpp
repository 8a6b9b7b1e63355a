// Serve's batch sampling on the device (backend/processed_sampling.h): the rows' parameters
// and token entries go up in one copy, kernels/sampling_rows.cuh processes, sorts and draws
// every row on the backend's stream, and the small per-row results stay behind for the
// caller to read.
#include "backend/cuda/cuda_processed_sampling.h"

#include <cuda_runtime.h>

#include <cstring>
#include <string>

#include "backend/cuda/cuda_backend_impl.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/processed_row_params.h"
#include "kernels/sampling_rows.cuh"

namespace llmrun {

bool cuda_samples_processed_rows(Backend& be) { return dynamic_cast<CudaBackend*>(&be) != nullptr; }

size_t cuda_processed_rows_workspace_bytes(int segments, int vocab) {
  return kernels::sample_processed_rows_workspace_bytes(segments, vocab);
}

void cuda_sample_processed_rows(Backend& be, Tensor out, Tensor workspace, const Tensor& logits,
                                const std::vector<ProcessedRowSample>& rows,
                                const std::vector<ProcessedTokenAdjust>& adjusts,
                                const std::vector<uint32_t>& masks, int top_n) {
  auto* cuda_be = dynamic_cast<CudaBackend*>(&be);
  LLMRUN_CHECK(cuda_be != nullptr, "sample_processed_rows: not the CUDA backend");
  if (rows.empty()) return;
  const auto stream = static_cast<cudaStream_t>(cuda_be->compute_stream());
  const float* lp = cuda::dev_f32(logits, "sample_processed_rows logits");
  int32_t* op = cuda::dev_i32(out, "sample_processed_rows out");
  const int64_t n = int64_t(rows.size()), vocab = logits.cols();
  LLMRUN_CHECK(top_n >= 0 && out.numel() == n * processed_result_words(top_n),
               "sample_processed_rows: out " + out.shape_str() + " for " + std::to_string(n) +
                   " rows of " + std::to_string(top_n) + " alternatives");
  const std::vector<int32_t> raw_rows = processed_raw_rows(rows, adjusts);
  const int n_raw = int(raw_rows.size());
  const size_t bytes = kernels::sample_processed_rows_workspace_bytes(int(n) + n_raw, int(vocab));
  LLMRUN_CHECK(workspace.device == Device::cuda && workspace.bytes() >= bytes,
               "sample_processed_rows: a workspace of " + std::to_string(workspace.bytes()) +
                   " bytes, " + std::to_string(bytes) + " needed");
  std::vector<kernels::ProcessedRow> params(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const ProcessedRowSample& s = rows[r];
    LLMRUN_CHECK(s.logits_row >= 0 && s.logits_row < logits.rows(),
                 "sample_processed_rows: no logits row " + std::to_string(s.logits_row));
    params[r] = processed_row_params(s);
    LLMRUN_CHECK(s.mask_at < 0 || size_t(s.mask_at) + size_t((vocab + 31) / 32) <= masks.size(),
                 "sample_processed_rows: row " + std::to_string(r) + "'s bitmask outside `masks`");
  }
  for (int j = 0; j < n_raw; ++j) params[size_t(raw_rows[size_t(j)])].raw_segment = int(n) + j;
  std::vector<kernels::TokenAdjust> adj(adjusts.size());
  for (size_t e = 0; e < adjusts.size(); ++e) {
    const ProcessedTokenAdjust& a = adjusts[e];
    LLMRUN_CHECK(a.row >= 0 && a.row < n && a.id >= 0 && a.id < vocab,
                 "sample_processed_rows: token entry " + std::to_string(a.id) + " of row " +
                     std::to_string(a.row) + " outside the batch");
    adj[e] = {a.row, a.id, a.seen, a.generated, a.has_bias, a.bias};
  }
  // Rows, entries, raw rows and bitmasks packed back to back: one upload, from pageable memory (so
  // the copy has left `host` when cudaMemcpyAsync returns). The buffer is freed into the
  // stream-ordered cache while the kernels that read it are still queued, which that cache
  // allows.
  auto aligned = [](size_t b) { return (b + 255) / 256 * 256; };
  const size_t row_bytes = params.size() * sizeof(kernels::ProcessedRow);
  const size_t adj_at = aligned(row_bytes);
  const size_t raw_at = adj_at + aligned(adj.size() * sizeof(kernels::TokenAdjust));
  const size_t mask_at = raw_at + aligned(raw_rows.size() * sizeof(int32_t));
  const size_t up_bytes = mask_at + masks.size() * sizeof(uint32_t);
  std::vector<char> host(up_bytes);
  std::memcpy(host.data(), params.data(), row_bytes);
  if (!adj.empty()) std::memcpy(host.data() + adj_at, adj.data(), adj.size() * sizeof(adj[0]));
  if (n_raw) std::memcpy(host.data() + raw_at, raw_rows.data(), raw_rows.size() * 4);
  if (!masks.empty()) std::memcpy(host.data() + mask_at, masks.data(), masks.size() * 4);
  Buffer up = be.allocate(up_bytes);
  cuda::check(cudaMemcpyAsync(up.data(), host.data(), up_bytes, cudaMemcpyHostToDevice, stream),
              "sample_processed_rows parameters");
  const char* base = static_cast<const char*>(up.data());
  kernels::sample_processed_rows(op, top_n, lp, int(vocab),
                                 reinterpret_cast<const kernels::ProcessedRow*>(base), int(n),
                                 reinterpret_cast<const int32_t*>(base + raw_at), n_raw,
                                 reinterpret_cast<const kernels::TokenAdjust*>(base + adj_at),
                                 int(adj.size()), reinterpret_cast<const uint32_t*>(base + mask_at),
                                 int(masks.size()), workspace.data, bytes, stream);
  cuda::check_launch("sample_processed_rows");
}

}  // namespace llmrun
