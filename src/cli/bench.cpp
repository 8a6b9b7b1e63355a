#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <string>
#include <thread>

#include "bench/serve_bench.h"
#include "ckpt/model_dir.h"
#include "cli/backend_option.h"
#include "cli/commands.h"
#include "cli/speculative_option.h"
#include "serve/http_server.h"
#include "util/error.h"

namespace llmrun::cli {

namespace {
struct BenchServeArgs {
  std::string url, model_dir, json_out, rate = "inf";
  ServeBenchOptions opts;
  BackendOptions backend;
  int max_num_seqs = 64, max_batched_tokens = 512;
  SpeculativeOptions speculative;
};

// Serves model_dir in this process on a free loopback port for the duration of `body`.
template <class F>
void with_local_server(BenchServeArgs& a, F body) {
  auto backend = make_cli_backend(a.backend, {a.model_dir, a.speculative.draft_model_dir});
  LoadedModel m = load_model_dir(a.model_dir, *backend);
  const ModelConfig& cfg = m.model->config();
  EngineConfig ec;
  ec.max_num_seqs = a.max_num_seqs;
  ec.max_batched_tokens = a.max_batched_tokens;
  ec.max_model_len = cfg.seq_len;
  ec.num_blocks = kv_blocks_for_bytes(cfg, ec.block_size,
                                      int64_t(2) * cfg.layers * cfg.kv_heads * cfg.head_dim() * 4 *
                                          ec.max_num_seqs * (ec.max_model_len + ec.block_size));
  if (a.opts.input_len + a.opts.output_len > ec.max_model_len)
    throw UserError(
        "--input-len + --output-len = " + std::to_string(a.opts.input_len + a.opts.output_len) +
        " exceeds the model's context of " + std::to_string(ec.max_model_len));
  LoadedModel draft;
  ec.speculative = make_speculative_config(a.speculative, m, *backend, draft);
  Engine engine(*m.model, *m.tokenizer, ec);
  ServerOptions so;
  so.port = 0;
  so.model_name = std::filesystem::path(a.model_dir).lexically_normal().filename().string();
  so.max_queued = 1 << 20;
  HttpServer server(engine, *m.tokenizer, ChatTemplate::for_model_dir(a.model_dir), so);
  a.opts.host = "127.0.0.1";
  a.opts.port = server.listen();
  std::thread serving([&] { server.run(); });
  try {
    body();
  } catch (...) {
    server.shutdown();
    serving.join();
    throw;
  }
  server.shutdown();
  serving.join();
}

int bench_serve(BenchServeArgs& a) {
  if (a.url.empty() == a.model_dir.empty())
    throw UserError("bench serve: give exactly one of --url and --model-dir");
  if (a.rate == "inf") {
    a.opts.request_rate = 0;
  } else {
    try {
      a.opts.request_rate = std::stod(a.rate);
    } catch (const std::exception&) {
      a.opts.request_rate = -1;
    }
    if (!(a.opts.request_rate > 0))
      throw UserError("--request-rate must be a positive number or 'inf', got '" + a.rate + "'");
  }
  nlohmann::json result;
  auto run = [&] {
    result = run_serve_bench(a.opts);
    std::fputs(format_serve_bench(result).c_str(), stdout);
    if (!a.json_out.empty()) {
      std::ofstream out(a.json_out);
      if (!(out << result.dump(2) << "\n")) throw UserError("--json: cannot write " + a.json_out);
    }
  };
  if (!a.url.empty()) {
    std::smatch m;
    static const std::regex re(R"(^http://([^:/]+):(\d+)/?$)");
    if (!std::regex_match(a.url, m, re))
      throw UserError("--url must look like http://HOST:PORT, got '" + a.url + "'");
    a.opts.host = m[1];
    a.opts.port = std::stoi(m[2]);
    run();
  } else {
    with_local_server(a, run);
  }
  return 0;
}
}  // namespace

Command add_bench_command(CLI::App& root, const std::vector<std::string>& argv) {
  auto a = std::make_shared<BenchServeArgs>();
  CLI::App* bench = root.add_subcommand("bench", "Benchmarks");
  bench->require_subcommand(1);
  CLI::App* app = bench->add_subcommand(
      "serve", "Online serving benchmark (vLLM's definitions) against a server");
  app->add_option("--url", a->url, "Server to load, http://HOST:PORT");
  app->add_option("--model-dir", a->model_dir,
                  "Serve this model in-process on a loopback port and load it");
  app->add_option("--num-prompts", a->opts.num_prompts, "Requests to send")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app->add_option("--request-rate", a->rate, "Poisson arrival rate in requests/s, or inf")
      ->capture_default_str();
  app->add_option("--input-len", a->opts.input_len, "Prompt tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app->add_option("--output-len", a->opts.output_len, "Generated tokens per request")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  app->add_option("--max-concurrency", a->opts.max_concurrency,
                  "Requests in flight at most (0: unlimited)")
      ->check(CLI::NonNegativeNumber);
  app->add_option("--seed", a->opts.seed, "Seed for prompts and arrivals");
  app->add_option("--json", a->json_out, "Write the results as JSON here");
  app->add_option("--dataset", a->opts.dataset,
                  "Prompts: random bytes, repeat (a short unit repeated), text (--dataset-path)")
      ->capture_default_str();
  app->add_option("--dataset-path", a->opts.dataset_path,
                  "With --dataset text: a file whose byte windows are the prompts");
  add_backend_options(app, a->backend, /*with_dtype=*/true);
  app->add_option("--max-num-seqs", a->max_num_seqs, "With --model-dir: running batch limit")
      ->check(CLI::Range(1, 4096));
  app->add_option("--max-batched-tokens", a->max_batched_tokens,
                  "With --model-dir: tokens per step")
      ->check(CLI::Range(1, 1 << 20));
  add_speculative_options(app, a->speculative);  // with --model-dir
  const std::vector<Command> others = {add_bench_train_command(*bench, argv),
                                       add_bench_kernels_command(*bench),
                                       add_bench_gemm_command(*bench)};
  return {bench, [a, app, others]() {
            for (const Command& c : others)
              if (c.app->parsed()) return c.run();
            if (!app->parsed())
              throw UserError("bench: choose a benchmark (serve, train, kernels, gemm)");
            return bench_serve(*a);
          }};
}

}  // namespace llmrun::cli
