#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>

#include "ckpt/gguf_model.h"
#include "ckpt/gguf_tokenizer.h"
#include "ckpt/model_dir.h"
#include "cli/backend_option.h"
#include "cli/commands.h"
#include "cli/speculative_option.h"
#include "quant/kv_cache_dtype.h"
#include "serve/http_server.h"
#include "util/error.h"
#include "util/heap_release.h"

namespace llmrun::cli {

namespace {
struct ServeArgs {
  std::string model_dir;
  ServerOptions server;
  EngineConfig engine;
  int64_t kv_cache_bytes = 0;
  int kv_blocks = 0;
  BackendOptions backend;
  bool no_prefix_caching = false;
  SpeculativeOptions speculative;
  std::string kv_dtype = "f32";
  std::vector<std::string> loras;  // NAME=DIR
  bool enable_lora = false;
  int max_loras = 8, max_cpu_loras = 0, max_lora_rank = 64;
};

int serve(ServeArgs& a) {
  auto backend = make_cli_backend(a.backend, {a.model_dir, a.speculative.draft_model_dir});
  LoadedModel m = load_model_dir(a.model_dir, *backend);
  const ModelConfig& cfg = m.model->config();
  if (m.tokenizer->vocab_size() > cfg.vocab)
    throw UserError(a.model_dir + ": the tokenizer has " +
                    std::to_string(m.tokenizer->vocab_size()) + " tokens but the model only " +
                    std::to_string(cfg.vocab));
  EngineConfig& ec = a.engine;
  ec.stop_token_ids = m.eos_token_ids;
  if (ec.max_model_len == 0) ec.max_model_len = cfg.seq_len;
  if (cfg.arch == Arch::gpt2 && ec.max_model_len > cfg.seq_len)
    throw UserError("--max-model-len " + std::to_string(ec.max_model_len) +
                    " exceeds this GPT-2 model's " + std::to_string(cfg.seq_len) + " positions");
  ec.max_batched_tokens = std::max(ec.max_batched_tokens, 1);
  ec.kv_dtype = quant::parse_kv_dtype(a.kv_dtype);
  quant::check_kv_dtype(ec.kv_dtype, cfg.head_dim());
  if (a.kv_blocks > 0) {
    ec.num_blocks = a.kv_blocks;
  } else {
    // Default: room for every sequence at full length, capped at 2 GiB.
    const int64_t bytes =
        a.kv_cache_bytes > 0
            ? a.kv_cache_bytes
            : std::min<int64_t>(int64_t(2) << 30, quant::kv_bytes_per_token(cfg, ec.kv_dtype) *
                                                      ec.max_num_seqs *
                                                      (ec.max_model_len + ec.block_size));
    ec.num_blocks = kv_blocks_for_bytes(cfg, ec.block_size, bytes, ec.kv_dtype);
    if (ec.num_blocks < 1)
      throw UserError("--kv-cache-bytes " + std::to_string(bytes) + " holds not even one KV block");
  }
  ec.prefix_caching = !a.no_prefix_caching;
  if (a.server.model_name.empty())
    a.server.model_name = std::filesystem::path(a.model_dir).lexically_normal().filename().string();
  if (a.server.model_name.empty())
    a.server.model_name = std::filesystem::path(a.model_dir).parent_path().filename().string();
  const ChatTemplate tmpl =
      is_gguf_file(a.model_dir)
          ? ChatTemplate::from_config(gguf_tokenizer_config(GgufReader(a.model_dir)))
          : ChatTemplate::for_model_dir(a.model_dir);
  LoadedModel draft;
  ec.speculative = make_speculative_config(a.speculative, m, *backend, draft);
  std::unique_ptr<LoraRegistry> loras;
  if (a.enable_lora || !a.loras.empty()) {
    if (a.max_cpu_loras > 0 && a.max_cpu_loras < a.max_loras)
      throw UserError("--max-cpu-loras " + std::to_string(a.max_cpu_loras) +
                      " is below --max-loras " + std::to_string(a.max_loras) +
                      " (a batch's adapters must all be loaded)");
    loras = std::make_unique<LoraRegistry>(*m.model, a.server.model_name, a.max_cpu_loras,
                                           a.max_lora_rank);
    ec.max_loras = a.max_loras;
    for (const std::string& spec : a.loras) {
      const size_t eq = spec.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == spec.size())
        throw UserError("--lora " + spec + ": expected NAME=DIR");
      loras->load(spec.substr(0, eq), spec.substr(eq + 1));
    }
    ec.max_lora_width = loras->max_width();
    a.server.loras = loras.get();
  }
  Engine engine(*m.model, *m.tokenizer, ec);
  spdlog::info("{}",
               quant::kv_cache_summary(cfg, ec.kv_dtype, int64_t(ec.num_blocks) * ec.block_size));
  HttpServer server(engine, *m.tokenizer, tmpl, a.server);
  release_free_heap();  // what loading, the metadata's second read and the setup freed
  server.run();
  return 0;
}
}  // namespace

Command add_serve_command(CLI::App& root) {
  auto a = std::make_shared<ServeArgs>();
  CLI::App* app =
      root.add_subcommand("serve", "Serve a model directory over an OpenAI-compatible HTTP API");
  app->add_option("model_dir", a->model_dir, "Hugging Face model directory")->required();
  app->add_option("--host", a->server.host, "Address to listen on")->capture_default_str();
  app->add_option("--port", a->server.port, "Port (0: any free port; the bound one is logged)")
      ->check(CLI::Range(0, 65535))
      ->capture_default_str();
  app->add_option("--served-model-name", a->server.model_name,
                  "Model id clients use (default: the directory name)");
  app->add_option("--api-key", a->server.api_key,
                  "Require 'Authorization: Bearer KEY' on /v1 and tokenizer routes");
  app->add_option("--max-num-seqs", a->engine.max_num_seqs,
                  "Sequences in the running batch at most")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app->add_option("--max-batched-tokens", a->engine.max_batched_tokens,
                  "Tokens per model step at most (prefills are chunked)")
      ->check(CLI::Range(1, 1 << 20))
      ->capture_default_str();
  auto* bytes = app->add_option("--kv-cache-bytes", a->kv_cache_bytes, "KV cache size in bytes")
                    ->check(CLI::Range(int64_t(1), int64_t(1) << 40));
  app->add_option("--kv-blocks", a->kv_blocks, "KV cache size in blocks")
      ->check(CLI::Range(1, 1 << 30))
      ->excludes(bytes);
  app->add_option("--block-size", a->engine.block_size, "Tokens per KV block")
      ->check(CLI::Range(1, 1024))
      ->capture_default_str();
  app->add_option("--max-queued", a->server.max_queued,
                  "Sequences that may wait beyond --max-num-seqs; more get 429")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app->add_option("--write-timeout", a->server.write_timeout_s,
                  "Seconds a response write may make no progress before the client is dropped")
      ->check(CLI::Range(1, 86400))
      ->capture_default_str();
  app->add_option("--shutdown-timeout", a->server.shutdown_timeout_s,
                  "Seconds SIGTERM waits for in-flight requests before dropping them (a second "
                  "SIGTERM: at once)")
      ->check(CLI::Range(0, 86400))
      ->capture_default_str();
  app->add_option("--max-model-len", a->engine.max_model_len,
                  "Prompt + generated tokens per sequence (default: the model's context)")
      ->check(CLI::Range(2, 1 << 24));
  add_backend_options(app, a->backend, /*with_dtype=*/true);
  app->add_flag("--no-prefix-caching", a->no_prefix_caching,
                "Do not reuse KV blocks of common prompt prefixes");
  add_speculative_options(app, a->speculative);
  app->add_option("--kv-dtype", a->kv_dtype,
                  "KV cache storage: f32, f16, bf16 or q8_0 (reduced types: CPU backend)")
      ->capture_default_str();
  app->add_option("--lora", a->loras,
                  "A LoRA adapter (PEFT dir) as NAME=DIR; requests select it with model: NAME "
                  "(repeatable)");
  app->add_flag(
      "--enable-lora", a->enable_lora,
      "Serve LoRA adapters loaded at runtime (/v1/load_lora_adapter) even with no --lora");
  app->add_option("--max-loras", a->max_loras,
                  "Distinct LoRA adapters in one batch at most (as vLLM); requests for more "
                  "adapters wait their turn")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  app->add_option("--max-cpu-loras", a->max_cpu_loras,
                  "LoRA adapters loaded at once at most (0: no limit; else >= --max-loras)")
      ->check(CLI::Range(0, 1 << 20))
      ->capture_default_str();
  app->add_option("--max-lora-rank", a->max_lora_rank, "Largest LoRA rank accepted")
      ->check(CLI::Range(1, 4096))
      ->capture_default_str();
  return {app, [a]() { return serve(*a); }};
}

}  // namespace llmrun::cli
