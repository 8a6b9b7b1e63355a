#pragma once
// The OpenAI-compatible HTTP front end (Boost.Beast on Asio, C++20 coroutines): one strand
// per connection, requests handed to the Engine, events streamed back as they come.
// SIGTERM/SIGINT stop accepting and let in-flight requests finish, then run() returns. A
// client that stops reading cannot hold the server: every write must make progress within
// write_timeout_s, and shutdown_timeout_s after the signal (or at a second signal) requests
// still running are aborted and every connection is closed.
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "data/tokenizer.h"
#include "serve/chat_template.h"
#include "serve/engine.h"
#include "serve/lora_registry.h"

namespace llmrun {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (the bound one is logged)
  std::string model_name;
  std::string api_key;              // empty: no authentication
  int max_queued = 256;             // sequences allowed to wait beyond max_num_seqs; more: 429
  size_t max_body_bytes = 4 << 20;  // larger bodies: 413
  int io_threads = 2;
  int request_timeout_s = 30;  // a request's headers and body must arrive within this
  int write_timeout_s = 30;    // a response write that makes no progress this long drops the client
  int shutdown_timeout_s = 30;  // after SIGTERM: in-flight requests get this long, then are dropped
  LoraRegistry* loras = nullptr;  // multi-LoRA serving (serve/lora_api.h); null: none
};

class HttpServer {
 public:
  HttpServer(Engine& engine, const Tokenizer& tok, const ChatTemplate& tmpl,
             const ServerOptions& opts);
  ~HttpServer();
  // Binds (once) and returns the bound port; prints "listening on http://HOST:PORT".
  int listen();
  // Binds if needed and serves until SIGTERM/SIGINT or shutdown(), then drains.
  void run();
  // Thread-safe: stop accepting, finish what is in flight, return from run().
  void shutdown();

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace llmrun
