#include "serve/http_server.h"

#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <cerrno>
#include <chrono>
#include <deque>
#include <mutex>
#include <sstream>
#include <thread>

#include <spdlog/spdlog.h>

#include "serve/openai_api.h"
#include "web/web_assets.h"

namespace llmrun {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using net::awaitable;
using net::use_awaitable;

namespace {

// Events of one HTTP request's sequences, handed from the engine thread to the connection's
// strand; the timer is the doorbell.
struct Channel {
  explicit Channel(net::any_io_executor ex) : timer(ex) {}
  std::mutex mu;
  std::deque<std::pair<int, SequenceEvent>> events;
  net::steady_timer timer;
  std::vector<uint64_t> ids;
  bool client_gone = false;    // strand only
  bool request_done = false;   // strand only
};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

using Request = http::request<http::string_body>;

}  // namespace

struct HttpServer::Impl {
  Impl(Engine& e, const Tokenizer& t, const ChatTemplate& tm, const ServerOptions& o)
      : engine(e), tok(t), tmpl(tm), opts(o),
        ctx{tok, tmpl, o.model_name, e.config().max_model_len, t.vocab_size()} {}

  Engine& engine;
  const Tokenizer& tok;
  ChatTemplate tmpl;
  ServerOptions opts;
  ApiContext ctx;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::atomic<bool> draining{false};
  std::atomic<int> active_requests{0};
  std::atomic<int64_t> http_requests{0}, rejected_429{0}, client_aborts{0};

  // ---------------------------------------------------------------- responses
  awaitable<void> write_text(beast::tcp_stream& s, const Request& req, http::status st, const std::string& body,
                             const char* content_type, bool keep_alive) {
    http::response<http::string_body> res{st, req.version()};
    res.set(http::field::server, "llmrun");
    res.set(http::field::content_type, content_type);
    res.keep_alive(keep_alive);
    res.body() = body;
    res.prepare_payload();
    beast::error_code ec;
    co_await http::async_write(s, res, net::redirect_error(use_awaitable, ec));
  }
  awaitable<void> write_error(beast::tcp_stream& s, const Request& req, const ApiError& e, bool keep_alive) {
    co_await write_text(s, req, static_cast<http::status>(e.status), dump(error_body(e)), "application/json", keep_alive);
  }

  void check_auth(const Request& req) const {
    if (opts.api_key.empty()) return;
    const auto it = req.find(http::field::authorization);
    const std::string want = "Bearer " + opts.api_key;
    if (it == req.end() || std::string(it->value()) != want)
      throw ApiError(401, "authentication_error", it == req.end() ? "missing API key: send 'Authorization: Bearer KEY'"
                                                                  : "incorrect API key");
  }

  std::string metrics_text() {
    const EngineStats st = engine.stats();
    std::ostringstream o;
    auto gauge = [&](const char* name, const char* help, double v) {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n" << name << " " << v << "\n";
    };
    auto counter = [&](const char* name, const char* help, double v) {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n" << name << " " << v << "\n";
    };
    gauge("llmrun:num_requests_running", "Sequences in the running batch.", st.running);
    gauge("llmrun:num_requests_waiting", "Sequences waiting to be scheduled.", st.waiting);
    gauge("llmrun:kv_cache_usage_perc", "Fraction of KV blocks referenced by sequences (1 = full).",
          st.kv_blocks ? double(st.kv_blocks_used) / st.kv_blocks : 0.0);
    gauge("llmrun:kv_cache_blocks_used", "KV blocks referenced by sequences.", st.kv_blocks_used);
    gauge("llmrun:kv_cache_num_blocks", "KV blocks in the pool.", st.kv_blocks);
    gauge("llmrun:kv_cache_blocks_cached", "Full blocks registered for prefix reuse.", st.kv_blocks_cached);
    counter("llmrun:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.", double(st.prefix_queries));
    counter("llmrun:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.", double(st.prefix_hits));
    counter("llmrun:num_preemptions_total", "Sequences preempted (recomputed later) for lack of KV blocks.",
            double(st.preemptions));
    counter("llmrun:prompt_tokens_total", "Prompt tokens received.", double(st.prompt_tokens));
    counter("llmrun:generation_tokens_total", "Tokens generated.", double(st.generation_tokens));
    counter("llmrun:engine_steps_total", "Model steps run.", double(st.steps));
    counter("llmrun:http_requests_total", "HTTP requests received.", double(http_requests.load()));
    counter("llmrun:rejected_requests_total", "Requests answered 429 (queue full).", double(rejected_429.load()));
    counter("llmrun:client_aborts_total", "Requests aborted because the client went away.", double(client_aborts.load()));
    ServingMetrics& m = engine.metrics();
    o << m.ttft.render("llmrun:time_to_first_token_seconds", "Time to first token.");
    o << m.itl.render("llmrun:inter_token_latency_seconds", "Time between tokens of a sequence.");
    o << m.e2e.render("llmrun:e2e_request_latency_seconds", "Sequence latency from arrival to finish.");
    return o.str();
  }

  // ---------------------------------------------------------------- generation
  static awaitable<void> watch_disconnect(tcp::socket& sock, std::shared_ptr<Channel> ch, Engine& engine,
                                          std::atomic<int64_t>& aborts) {
    beast::error_code ec;
    co_await sock.async_wait(tcp::socket::wait_read, net::redirect_error(use_awaitable, ec));
    if (ec || ch->request_done) co_return;
    char c;
    const ssize_t r = ::recv(sock.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))) co_return;  // data, not a hang-up
    ch->client_gone = true;
    ++aborts;
    for (uint64_t id : ch->ids) engine.abort(id);
    ch->timer.cancel();
  }

  awaitable<bool> generate(beast::tcp_stream& stream, const Request& req, bool chat) {
    json body;
    try {
      body = json::parse(req.body());
    } catch (const std::exception& e) {
      throw invalid(std::string("the body is not valid JSON: ") + e.what());
    }
    const CompletionJob job = parse_completion_request(body, chat, ctx);
    const EngineConfig& ec = engine.config();
    if (engine.unfinished() + job.sequences() > ec.max_num_seqs + opts.max_queued) {
      ++rejected_429;
      throw ApiError(429, "rate_limit_exceeded",
                     "the server is at capacity (" + std::to_string(engine.unfinished()) + " sequences in flight); retry later");
    }
    struct Active {
      std::atomic<int>& n;
      explicit Active(std::atomic<int>& c) : n(c) { ++n; }
      ~Active() { --n; }
    } active(active_requests);

    auto ex = co_await net::this_coro::executor;
    auto ch = std::make_shared<Channel>(ex);
    ResponseBuilder rb(job, ctx);
    for (size_t p = 0; p < job.prompts.size(); ++p)
      for (int i = 0; i < job.n; ++i) {
        GenerationParams gp = job.params;
        gp.sampling.seed += static_cast<uint64_t>(i);
        const int index = static_cast<int>(p) * job.n + i;
        ch->ids.push_back(engine.submit(job.prompts[p], gp, [ch, index](SequenceEvent&& ev) {
          {
            std::lock_guard<std::mutex> lock(ch->mu);
            ch->events.emplace_back(index, std::move(ev));
          }
          net::post(ch->timer.get_executor(), [ch] { ch->timer.cancel(); });
        }));
      }
    net::co_spawn(ex, watch_disconnect(stream.socket(), ch, engine, client_aborts), net::detached);

    beast::error_code wec;
    http::response<http::empty_body> head{http::status::ok, req.version()};
    http::response_serializer<http::empty_body> head_sr{head};
    auto abort_all = [&] {
      if (ch->client_gone) return;
      ch->client_gone = true;
      ++client_aborts;
      for (uint64_t id : ch->ids) engine.abort(id);
    };
    auto send_chunk = [&](const std::string& data) -> awaitable<void> {
      if (ch->client_gone) co_return;
      co_await net::async_write(stream, http::make_chunk(net::buffer(data)), net::redirect_error(use_awaitable, wec));
      if (wec) abort_all();
    };
    if (job.stream) {
      head.set(http::field::server, "llmrun");
      head.set(http::field::content_type, "text/event-stream");
      head.set(http::field::cache_control, "no-cache");
      head.keep_alive(req.keep_alive());
      head.chunked(true);
      co_await http::async_write_header(stream, head_sr, net::redirect_error(use_awaitable, wec));
      if (wec) abort_all();
    }
    int remaining = job.sequences();
    while (remaining > 0) {
      std::deque<std::pair<int, SequenceEvent>> batch;
      {
        std::lock_guard<std::mutex> lock(ch->mu);
        batch.swap(ch->events);
      }
      if (batch.empty()) {
        ch->timer.expires_at(net::steady_timer::time_point::max());
        beast::error_code tec;
        co_await ch->timer.async_wait(net::redirect_error(use_awaitable, tec));
        continue;
      }
      std::string out;
      for (auto& [index, ev] : batch) {
        if (ev.finished) --remaining;
        if (ch->client_gone) continue;
        if (job.stream)
          for (const json& c : rb.stream_chunks(index, ev)) out += "data: " + dump(c) + "\n\n";
        else
          rb.add(index, ev);
      }
      if (job.stream && !out.empty()) co_await send_chunk(out);
    }
    ch->request_done = true;
    beast::error_code cec;
    stream.socket().cancel(cec);  // ends the disconnect watcher
    if (ch->client_gone) co_return false;
    if (job.stream) {
      std::string tail;
      if (job.include_usage) tail += "data: " + dump(rb.usage_chunk()) + "\n\n";
      tail += "data: [DONE]\n\n";
      co_await send_chunk(tail);
      if (!ch->client_gone)
        co_await net::async_write(stream, http::make_chunk_last(), net::redirect_error(use_awaitable, wec));
      co_return !ch->client_gone && !wec && req.keep_alive();
    }
    co_await write_text(stream, req, http::status::ok, dump(rb.final_response()), "application/json", req.keep_alive());
    co_return req.keep_alive();
  }

  // ---------------------------------------------------------------- routing
  awaitable<bool> route(beast::tcp_stream& stream, const Request& req) {
    std::string target(req.target());
    if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
    const bool get = req.method() == http::verb::get, post = req.method() == http::verb::post;
    const bool keep = req.keep_alive();
    if (target == "/health" && get) {
      co_await write_text(stream, req, draining ? http::status::service_unavailable : http::status::ok, "", "text/plain",
                          keep);
      co_return keep;
    }
    if (target == "/metrics" && get) {
      co_await write_text(stream, req, http::status::ok, metrics_text(), "text/plain; version=0.0.4", keep);
      co_return keep;
    }
    if (draining) throw ApiError(503, "service_unavailable", "the server is shutting down");
    if (target == "/v1/models" && get) {
      check_auth(req);
      const json models = {{"object", "list"},
                           {"data", json::array({{{"id", opts.model_name},
                                                  {"object", "model"},
                                                  {"created", 0},
                                                  {"owned_by", "llmrun"},
                                                  {"max_model_len", ctx.max_model_len}}})}};
      co_await write_text(stream, req, http::status::ok, dump(models), "application/json", keep);
      co_return keep;
    }
    if ((target == "/v1/completions" || target == "/v1/chat/completions") && post) {
      check_auth(req);
      co_return co_await generate(stream, req, target == "/v1/chat/completions");
    }
    if ((target == "/tokenize" || target == "/detokenize") && post) {
      check_auth(req);
      json body;
      try {
        body = json::parse(req.body());
      } catch (const std::exception& e) {
        throw invalid(std::string("the body is not valid JSON: ") + e.what());
      }
      if (!body.is_object()) throw invalid("the request body must be a JSON object");
      json out;
      if (target == "/tokenize") {
        std::vector<int32_t> ids;
        if (body.contains("messages"))
          ids = tok.encode_prompt(render_chat(body["messages"], tmpl));
        else if (body.contains("prompt") && body["prompt"].is_string())
          ids = tok.encode_prompt(body["prompt"].get<std::string>());
        else
          throw invalid("'prompt' (a string) or 'messages' is required", "prompt");
        out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.max_model_len}};
      } else {
        if (!body.contains("tokens") || !body["tokens"].is_array()) throw invalid("'tokens' (an array) is required", "tokens");
        std::vector<int32_t> ids;
        for (const auto& t : body["tokens"]) {
          if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= tok.vocab_size())
            throw invalid("'tokens' holds " + t.dump() + ", not a token id below " + std::to_string(tok.vocab_size()),
                          "tokens");
          ids.push_back(static_cast<int32_t>(t.get<int64_t>()));
        }
        out = {{"prompt", tok.decode(ids)}};
      }
      co_await write_text(stream, req, http::status::ok, dump(out), "application/json", keep);
      co_return keep;
    }
    // The chat playground (web/playground), static and public: its API calls carry the key.
    if (const WebAsset* page = get ? find_web_asset("playground", target) : nullptr) {
      co_await write_text(stream, req, http::status::ok, std::string(page->body), page->content_type.data(), keep);
      co_return keep;
    }
    const bool known = target == "/health" || target == "/metrics" || target == "/v1/models" ||
                       target == "/v1/completions" || target == "/v1/chat/completions" || target == "/tokenize" ||
                       target == "/detokenize";
    if (known) throw ApiError(405, "invalid_request_error", "method " + std::string(req.method_string()) + " not allowed on " + target);
    throw ApiError(404, "not_found_error", "no route " + target);
  }

  awaitable<void> session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(opts.max_body_bytes);
      parser.header_limit(64 * 1024);
      // A whole request must arrive in time: slow or stalled clients do not hold a slot.
      stream.expires_after(std::chrono::seconds(opts.request_timeout_s));
      beast::error_code ec;
      co_await http::async_read(stream, buffer, parser, net::redirect_error(use_awaitable, ec));
      stream.expires_never();
      if (ec == http::error::body_limit) {
        Request dummy;
        dummy.version(11);
        co_await write_error(stream, dummy,
                             ApiError(413, "invalid_request_error",
                                      "the request body exceeds " + std::to_string(opts.max_body_bytes) + " bytes"),
                             false);
        break;
      }
      if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == net::error::eof ||
          ec == net::error::connection_reset || ec == net::error::operation_aborted)
        break;
      if (ec) {
        Request dummy;
        dummy.version(11);
        co_await write_error(stream, dummy, invalid("malformed HTTP request: " + ec.message()), false);
        break;
      }
      ++http_requests;
      const Request req = parser.release();
      bool keep = false;
      std::unique_ptr<ApiError> error;
      try {
        keep = co_await route(stream, req);
      } catch (const ApiError& e) {
        error = std::make_unique<ApiError>(e);
      } catch (const UserError& e) {
        error = std::make_unique<ApiError>(400, "invalid_request_error", e.what());
      } catch (const std::exception& e) {
        spdlog::error("request {} failed: {}", std::string(req.target()), e.what());
        error = std::make_unique<ApiError>(500, "internal_error", std::string("internal error: ") + e.what());
      }
      if (error) {
        co_await write_error(stream, req, *error, req.keep_alive());
        keep = req.keep_alive();
      }
      if (!keep) break;
    }
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  awaitable<void> accept_loop() {
    for (;;) {
      auto strand = net::make_strand(ioc);
      beast::error_code ec;
      tcp::socket sock = co_await acceptor.async_accept(strand, net::redirect_error(use_awaitable, ec));
      if (ec) {
        if (!acceptor.is_open()) co_return;
        // Out of descriptors and the like: back off briefly instead of spinning.
        net::steady_timer t(ioc, std::chrono::milliseconds(20));
        co_await t.async_wait(net::redirect_error(use_awaitable, ec));
        continue;
      }
      // Stream chunks are small and latency is the point: no Nagle delay.
      sock.set_option(tcp::no_delay(true), ec);
      net::co_spawn(strand, session(std::move(sock)), net::detached);
    }
  }

  void begin_drain() {
    if (draining.exchange(true)) return;
    beast::error_code ignored;
    acceptor.close(ignored);
    net::co_spawn(ioc, drain(), net::detached);
  }

  awaitable<void> drain() {
    net::steady_timer t(ioc);
    while (active_requests.load() > 0 || engine.unfinished() > 0) {
      t.expires_after(std::chrono::milliseconds(20));
      beast::error_code ec;
      co_await t.async_wait(net::redirect_error(use_awaitable, ec));
    }
    spdlog::info("drained; exiting");
    ioc.stop();
  }
};

HttpServer::HttpServer(Engine& engine, const Tokenizer& tok, const ChatTemplate& tmpl, const ServerOptions& opts)
    : impl_(std::make_unique<Impl>(engine, tok, tmpl, opts)) {}

HttpServer::~HttpServer() = default;

int HttpServer::listen() {
  Impl& s = *impl_;
  if (s.acceptor.is_open()) return s.acceptor.local_endpoint().port();
  beast::error_code ec;
  const auto address = net::ip::make_address(s.opts.host, ec);
  if (ec) throw UserError("--host '" + s.opts.host + "' is not an IP address");
  const tcp::endpoint ep(address, static_cast<unsigned short>(s.opts.port));
  s.acceptor.open(ep.protocol(), ec);
  if (!ec) s.acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) s.acceptor.bind(ep, ec);
  if (!ec) s.acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec) throw UserError("cannot listen on " + s.opts.host + ":" + std::to_string(s.opts.port) + ": " + ec.message());
  const auto bound = s.acceptor.local_endpoint();
  spdlog::info("listening on http://{}:{} (model '{}', chat template {})", bound.address().to_string(), bound.port(),
               s.opts.model_name, s.tmpl.name());
  return bound.port();
}

void HttpServer::shutdown() {
  Impl& s = *impl_;
  net::post(s.ioc, [&s] { s.begin_drain(); });
}

void HttpServer::run() {
  Impl& s = *impl_;
  listen();
  net::signal_set signals(s.ioc, SIGTERM, SIGINT);
  signals.async_wait([&s](const beast::error_code& e, int sig) {
    if (e) return;
    spdlog::info("signal {}: no new requests; finishing {} in flight", sig, s.active_requests.load());
    s.begin_drain();
  });
  net::co_spawn(s.ioc, s.accept_loop(), net::detached);
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, s.opts.io_threads); ++i) threads.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (auto& t : threads) t.join();
}

}  // namespace llmrun
