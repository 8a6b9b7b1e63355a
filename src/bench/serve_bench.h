#pragma once
// src/bench owns what `llmrun bench` measures: serve_bench (below), train_bench (a recipe's
// training throughput through the real trainer), kernel_bench (backend GEMM and attention
// at a recipe's shapes) and train_flops (model/hardware FLOPs for MFU and HFU).
// serve_bench: the online-serving benchmark with vLLM's definitions: Poisson arrivals at
// --request-rate, optional cap on requests in flight, TTFT = time to the first content chunk, ITL =
// gaps between content chunks, TPOT = (e2e - TTFT) / (output tokens - 1), throughput over the whole
// run; mean, median and p99 of each.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>

namespace llmrun {

struct ServeBenchOptions {
  std::string host = "127.0.0.1";
  int port = 0;
  int num_prompts = 100;
  double request_rate = 0;  // requests/s; <= 0 means all at once (inf)
  int input_len = 128, output_len = 128;
  int max_concurrency = 0;  // 0: unlimited
  uint64_t seed = 0;
  // Prompts: "random" printable bytes; "repeat", a short random unit repeated (the
  // code/summarise-the-prompt shape where prompt lookup speculation pays); "text", windows of
  // the file dataset_path at random offsets. Byte ids, as for a byte-level vocabulary.
  std::string dataset = "random";
  std::string dataset_path;
};

// Runs the load against http://host:port and returns the results object (also what
// --json writes); "spec_decode" holds the server's speculative decoding counters over the run
// (from /metrics, llmrun's or vLLM's names) when it has any. Throws UserError when the server
// cannot be reached or answers errors.
nlohmann::json run_serve_bench(const ServeBenchOptions& o);
// The human-readable table of a results object.
std::string format_serve_bench(const nlohmann::json& r);

}  // namespace llmrun
