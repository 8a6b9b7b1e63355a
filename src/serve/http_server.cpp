#include "serve/http_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <deque>
#include <mutex>
#include <sstream>
#include <string_view>
#include <thread>
#include <unordered_set>

#include "serve/lora_api.h"
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
  bool client_gone = false;   // strand only
  bool request_done = false;  // strand only
};

// One open connection, so that shutdown can drop it. `stream` and `channel` are touched only on
// the connection's strand: by its session coroutine and by handlers posted there.
struct Connection {
  explicit Connection(net::any_io_executor ex) : strand(std::move(ex)) {}
  net::any_io_executor strand;
  beast::tcp_stream* stream = nullptr;  // null once the session ended
  std::shared_ptr<Channel> channel;     // the request generating now, if any
};

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

using Request = http::request<http::string_body>;

// What to answer a request with (besides the status line's version and keep-alive).
struct Reply {
  Reply(http::status st, std::string b, const char* type = "application/json")
      : status(st), body(std::move(b)), content_type(type) {}
  http::status status;
  std::string body;
  const char* content_type;
  std::vector<std::pair<http::field, std::string>> headers;
};

Reply error_reply(const ApiError& e) {
  Reply r(static_cast<http::status>(e.status), dump(error_body(e)));
  if (e.retry_after_s > 0)
    r.headers.emplace_back(http::field::retry_after, std::to_string(e.retry_after_s));
  if (!e.allow.empty()) r.headers.emplace_back(http::field::allow, e.allow);
  return r;
}

// After an error answered before the request was read in full, this much more of the
// request is read and dropped (bounded in bytes and seconds) before the socket closes.
constexpr size_t kLingerBytes = size_t(64) << 20;
constexpr uint32_t kHeaderLimit = 64 * 1024;  // request line + headers; more: 431
constexpr int kLingerSeconds = 10;

}  // namespace

struct HttpServer::Impl {
  Impl(Engine& e, const Tokenizer& t, const ChatTemplate& tm, const ServerOptions& o)
      : engine(e),
        tok(t),
        tmpl(tm),
        opts(o),
        ctx{tok, tmpl, o.model_name, e.config().max_model_len, t.vocab_size()} {
    ctx.constraints = &constraints;
    ctx.loras = o.loras;
  }

  Engine& engine;
  const Tokenizer& tok;
  ChatTemplate tmpl;
  ServerOptions opts;
  ApiContext ctx;
  structured::ConstraintCache constraints{tok};
  // Open connections (declared before ioc: sessions still suspended when ioc is destroyed
  // unregister themselves from their frames' destructors).
  std::mutex conns_mu;
  std::unordered_set<std::shared_ptr<Connection>> conns;
  net::io_context ioc;
  tcp::acceptor acceptor{ioc};
  std::atomic<bool> draining{false}, dropping{false};
  std::atomic<int> active_requests{0};  // completion requests generating
  std::atomic<int> in_flight{0};        // requests of any kind being answered: drain waits for them
  std::atomic<int64_t> http_requests{0}, rejected_429{0}, client_aborts{0}, write_timeouts{0};

  // ---------------------------------------------------------------- writing
  std::chrono::seconds write_timeout() const { return std::chrono::seconds(opts.write_timeout_s); }
  void count_write_error(const beast::error_code& ec) {
    if (ec == beast::error::timeout) ++write_timeouts;
  }

  // Writes all of `data`. Each write must make progress within the write timeout, so a client
  // that stops reading is dropped (the stream closes the socket) instead of holding the
  // request, its KV blocks and shutdown forever. False when the data did not all go out.
  awaitable<bool> send_bytes(beast::tcp_stream& s, std::string_view data) {
    beast::error_code ec;
    size_t done = 0;
    while (!ec && done < data.size()) {
      s.expires_after(write_timeout());
      done += co_await s.async_write_some(net::buffer(data.substr(done)),
                                          net::redirect_error(use_awaitable, ec));
    }
    s.expires_never();
    count_write_error(ec);
    co_return !ec;
  }

  template <class Body>
  awaitable<bool> send_message(beast::tcp_stream& s, http::response<Body>& res) {
    http::response_serializer<Body> sr{res};
    beast::error_code ec;
    while (!ec && !sr.is_done()) {
      s.expires_after(write_timeout());
      co_await http::async_write_some(s, sr, net::redirect_error(use_awaitable, ec));
    }
    s.expires_never();
    count_write_error(ec);
    co_return !ec;
  }

  template <class Body>
  static void set_fields(http::response<Body>& res, const Reply& r, bool keep_alive) {
    res.set(http::field::server, "llmrun");
    res.set(http::field::content_type, r.content_type);
    for (const auto& [f, v] : r.headers) res.set(f, v);
    res.keep_alive(keep_alive);
  }

  // A HEAD request gets the headers GET would, Content-Length included, and no body.
  awaitable<bool> respond(beast::tcp_stream& s, const Request& req, Reply r, bool keep_alive) {
    if (req.method() == http::verb::head) {
      http::response<http::empty_body> res{r.status, req.version()};
      set_fields(res, r, keep_alive);
      res.content_length(r.body.size());
      co_return co_await send_message(s, res);
    }
    http::response<http::string_body> res{r.status, req.version()};
    set_fields(res, r, keep_alive);
    res.body() = std::move(r.body);
    res.prepare_payload();
    co_return co_await send_message(s, res);
  }

  // For errors found before the request was read in full (413, malformed HTTP): answer, stop
  // sending, and read what the client still sends before closing. Closing a socket with
  // unread data makes the kernel send a reset, which can destroy the response before a client
  // that writes its whole body first gets to read it.
  awaitable<void> respond_and_linger(beast::tcp_stream& s, const ApiError& e) {
    Request dummy;
    dummy.version(11);
    if (!co_await respond(s, dummy, error_reply(e), false)) co_return;
    beast::error_code ec;
    s.socket().shutdown(tcp::socket::shutdown_send, ec);
    std::vector<char> sink(64 * 1024);
    size_t total = 0;
    s.expires_after(std::chrono::seconds(std::min(opts.request_timeout_s, kLingerSeconds)));
    while (!ec && total < kLingerBytes)
      total +=
          co_await s.async_read_some(net::buffer(sink), net::redirect_error(use_awaitable, ec));
    s.expires_never();
  }

  void check_auth(const Request& req) const {
    if (opts.api_key.empty()) return;
    const auto it = req.find(http::field::authorization);
    const std::string want = "Bearer " + opts.api_key;
    if (it == req.end() || std::string(it->value()) != want)
      throw ApiError(401, "authentication_error",
                     it == req.end() ? "missing API key: send 'Authorization: Bearer KEY'"
                                     : "incorrect API key");
  }

  std::string metrics_text() {
    const EngineStats st = engine.stats();
    std::ostringstream o;
    auto gauge = [&](const char* name, const char* help, double v) {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " gauge\n"
        << name << " " << v << "\n";
    };
    auto counter = [&](const char* name, const char* help, double v) {
      o << "# HELP " << name << " " << help << "\n# TYPE " << name << " counter\n"
        << name << " " << v << "\n";
    };
    gauge("llmrun:num_requests_running", "Sequences in the running batch.", st.running);
    gauge("llmrun:num_requests_waiting", "Sequences waiting to be scheduled.", st.waiting);
    gauge("llmrun:kv_cache_usage_perc", "Fraction of KV blocks referenced by sequences (1 = full).",
          st.kv_blocks ? double(st.kv_blocks_used) / st.kv_blocks : 0.0);
    gauge("llmrun:kv_cache_blocks_used", "KV blocks referenced by sequences.", st.kv_blocks_used);
    gauge("llmrun:kv_cache_num_blocks", "KV blocks in the pool.", st.kv_blocks);
    gauge("llmrun:kv_cache_blocks_cached", "Full blocks registered for prefix reuse.",
          st.kv_blocks_cached);
    counter("llmrun:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache.",
            double(st.prefix_queries));
    counter("llmrun:prefix_cache_hits_total", "Prompt tokens found in the prefix cache.",
            double(st.prefix_hits));
    counter("llmrun:num_preemptions_total",
            "Sequences preempted (recomputed later) for lack of KV blocks.",
            double(st.preemptions));
    gauge("llmrun:lora_max_adapters_per_step",
          "The most distinct LoRA adapters one step has run (at most --max-loras).",
          st.lora_max_per_step);
    counter("llmrun:lora_admission_waits_total",
            "Steps whose admission waited because a request's adapter exceeded --max-loras.",
            double(st.lora_waits));
    counter("llmrun:prompt_tokens_total", "Prompt tokens received.", double(st.prompt_tokens));
    counter("llmrun:generation_tokens_total", "Tokens generated.", double(st.generation_tokens));
    counter("llmrun:engine_steps_total", "Model steps run.", double(st.steps));
    counter("llmrun:http_requests_total", "HTTP requests received.", double(http_requests.load()));
    counter("llmrun:rejected_requests_total", "Requests answered 429 (queue full).",
            double(rejected_429.load()));
    counter("llmrun:client_aborts_total", "Requests aborted because the client went away.",
            double(client_aborts.load()));
    counter("llmrun:write_timeouts_total",
            "Clients dropped because they stopped reading their response.",
            double(write_timeouts.load()));
    {
      std::lock_guard<std::mutex> lock(conns_mu);
      gauge("llmrun:http_open_connections", "Open client connections.", double(conns.size()));
    }
    gauge("llmrun:http_requests_generating", "Completion requests in progress.",
          active_requests.load());
    gauge("llmrun:http_requests_in_progress", "Requests being answered (this one included).",
          in_flight.load());
    ServingMetrics& m = engine.metrics();
    o << m.ttft.render("llmrun:time_to_first_token_seconds", "Time to first token.");
    o << m.itl.render("llmrun:inter_token_latency_seconds", "Time between tokens of a sequence.");
    o << m.e2e.render("llmrun:e2e_request_latency_seconds",
                      "Sequence latency from arrival to finish.");
    o << m.spec.render("llmrun:", m.num_spec_tokens);
    return o.str();
  }

  // ---------------------------------------------------------------- generation
  static awaitable<void> watch_disconnect(tcp::socket& sock, std::shared_ptr<Channel> ch,
                                          Engine& engine, std::atomic<int64_t>& aborts) {
    beast::error_code ec;
    co_await sock.async_wait(tcp::socket::wait_read, net::redirect_error(use_awaitable, ec));
    if (ec || ch->request_done) co_return;
    char c;
    const ssize_t r = ::recv(sock.native_handle(), &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)))
      co_return;  // data, not a hang-up
    ch->client_gone = true;
    ++aborts;
    for (uint64_t id : ch->ids) engine.abort(id);
    ch->timer.cancel();
  }

  awaitable<bool> generate(beast::tcp_stream& stream, Connection& conn, const Request& req,
                           bool chat) {
    const json body = parse_body(req.body());
    const CompletionJob job = parse_completion_request(body, chat, ctx);
    const EngineConfig& ec = engine.config();
    const int capacity = ec.max_num_seqs + opts.max_queued;
    // More sequences than the server can ever hold: retrying cannot help, so not a 429.
    if (job.sequences() > capacity)
      throw invalid("the request asks for " + std::to_string(job.sequences()) + " sequences (" +
                        std::to_string(job.prompts.size()) + " prompt(s) x n " +
                        std::to_string(job.n) + "); this server holds at most " +
                        std::to_string(capacity) + " (--max-num-seqs + --max-queued)",
                    job.n > 1 ? "n" : "prompt");
    if (engine.unfinished() + job.sequences() > capacity) {
      ++rejected_429;
      ApiError busy(429, "rate_limit_exceeded",
                    "the server is at capacity (" + std::to_string(engine.unfinished()) +
                        " sequences in flight); retry later");
      busy.retry_after_s = 1;
      throw busy;
    }
    struct Active {
      std::atomic<int>& n;
      explicit Active(std::atomic<int>& c) : n(c) { ++n; }
      ~Active() { --n; }
    } active(active_requests);

    auto ex = co_await net::this_coro::executor;
    auto ch = std::make_shared<Channel>(ex);
    // Visible to a forced shutdown while this request runs.
    struct Registered {
      Connection& c;
      Registered(Connection& conn, std::shared_ptr<Channel> ch) : c(conn) {
        c.channel = std::move(ch);
      }
      ~Registered() { c.channel.reset(); }
    } registered(conn, ch);
    ResponseBuilder rb(job, ctx);
    std::vector<Engine::Submission> batch;
    for (size_t p = 0; p < job.prompts.size(); ++p)
      for (int i = 0; i < job.n; ++i) {
        GenerationParams gp = job.params;
        gp.sampling.seed += static_cast<uint64_t>(i);
        const int index = static_cast<int>(p) * job.n + i;
        batch.push_back({job.prompts[p], gp, [ch, index](SequenceEvent&& ev) {
                           {
                             std::lock_guard<std::mutex> lock(ch->mu);
                             ch->events.emplace_back(index, std::move(ev));
                           }
                           net::post(ch->timer.get_executor(), [ch] { ch->timer.cancel(); });
                         }});
      }
    ch->ids = engine.submit(std::move(batch));
    net::co_spawn(ex, watch_disconnect(stream.socket(), ch, engine, client_aborts), net::detached);

    auto abort_all = [&] {
      if (ch->client_gone) return;
      ch->client_gone = true;
      ++client_aborts;
      for (uint64_t id : ch->ids) engine.abort(id);
    };
    // HTTP/1.0 has no chunked encoding: its streams are close-delimited, the end of the body
    // is the end of the connection.
    const bool close_delimited = req.version() < 11;
    auto send_chunk = [&](const std::string& data) -> awaitable<void> {
      if (ch->client_gone) co_return;
      bool ok;
      if (close_delimited) {
        ok = co_await send_bytes(stream, data);
      } else {
        char size[20];
        std::snprintf(size, sizeof size, "%zx\r\n", data.size());
        ok = co_await send_bytes(stream, size + data + "\r\n");
      }
      if (!ok) abort_all();
    };
    if (job.stream) {
      http::response<http::empty_body> head{http::status::ok, req.version()};
      head.set(http::field::server, "llmrun");
      head.set(http::field::content_type, "text/event-stream");
      head.set(http::field::cache_control, "no-cache");
      head.keep_alive(!close_delimited && req.keep_alive());
      if (!close_delimited) head.chunked(true);
      http::response_serializer<http::empty_body> head_sr{head};
      beast::error_code wec;
      stream.expires_after(write_timeout());
      co_await http::async_write_header(stream, head_sr, net::redirect_error(use_awaitable, wec));
      stream.expires_never();
      count_write_error(wec);
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
      if (!close_delimited && !ch->client_gone && !co_await send_bytes(stream, "0\r\n\r\n"))
        ch->client_gone = true;
      co_return !ch->client_gone && !close_delimited && req.keep_alive();
    }
    const bool sent = co_await respond(
        stream, req, Reply{http::status::ok, dump(rb.final_response())}, req.keep_alive());
    if (!sent) ++client_aborts;
    co_return sent&& req.keep_alive();
  }

  // ---------------------------------------------------------------- routing
  awaitable<bool> route(beast::tcp_stream& stream, Connection& conn, const Request& req) {
    std::string target(req.target());
    if (auto q = target.find('?'); q != std::string::npos) target.resize(q);
    const bool get = req.method() == http::verb::get || req.method() == http::verb::head;
    const bool post = req.method() == http::verb::post;
    const bool keep = req.keep_alive();
    auto ok = [&](std::string body, const char* type) -> awaitable<bool> {
      co_return co_await respond(stream, req, Reply{http::status::ok, std::move(body), type},
                                 keep) &&
          keep;
    };
    if (target == "/health" && get) {
      const http::status st = draining ? http::status::service_unavailable : http::status::ok;
      co_return co_await respond(stream, req, Reply{st, "", "text/plain"}, keep) && keep;
    }
    if (target == "/metrics" && get)
      co_return co_await ok(metrics_text(), "text/plain; version=0.0.4");
    if (draining) throw ApiError(503, "service_unavailable", "the server is shutting down");
    if (target == "/v1/models" && get) {
      check_auth(req);
      json models = {{"object", "list"},
                     {"data", json::array({{{"id", opts.model_name},
                                            {"object", "model"},
                                            {"created", 0},
                                            {"owned_by", "llmrun"},
                                            {"max_model_len", ctx.max_model_len}}})}};
      if (opts.loras)
        for (json& card : lora_model_cards(*opts.loras, ctx.max_model_len))
          models["data"].push_back(std::move(card));
      co_return co_await ok(dump(models), "application/json");
    }
    if ((target == "/v1/completions" || target == "/v1/chat/completions") && post) {
      check_auth(req);
      co_return co_await generate(stream, conn, req, target == "/v1/chat/completions");
    }
    if ((target == "/tokenize" || target == "/detokenize") && post) {
      check_auth(req);
      const json body = parse_body(req.body());
      if (!body.is_object()) throw invalid("the request body must be a JSON object");
      json out;
      if (target == "/tokenize") {
        std::vector<int32_t> ids;
        if (body.contains("messages"))
          ids = tok.encode_prompt(render_chat(body["messages"], tmpl));
        else if (body.contains("prompt") && body["prompt"].is_string())
          ids = tok.encode_prompt(body["prompt"].get<std::string>());
        else if (body.contains("prompt"))
          throw invalid("'prompt' must be a string, got " + echo(body["prompt"]), "prompt");
        else
          throw invalid("'prompt' (a string) or 'messages' is required", "prompt");
        out = {{"tokens", ids}, {"count", ids.size()}, {"max_model_len", ctx.max_model_len}};
      } else {
        if (!body.contains("tokens")) throw invalid("'tokens' (an array) is required", "tokens");
        out = {{"prompt", tok.decode(token_ids(body["tokens"], tok.vocab_size(), "tokens"))}};
      }
      co_return co_await ok(dump(out), "application/json");
    }
    if (is_lora_admin_route(target) && post) {
      check_auth(req);
      co_return co_await ok(lora_admin(target, req.body(), opts.loras), "text/plain");
    }
    // The chat playground (web/playground), static and public: its API calls carry the key.
    if (const WebAsset* page = get ? find_web_asset("playground", target) : nullptr)
      co_return co_await ok(std::string(page->body), page->content_type.data());
    const bool get_route = target == "/health" || target == "/metrics" || target == "/v1/models";
    const bool post_route = target == "/v1/completions" || target == "/v1/chat/completions" ||
                            target == "/tokenize" || target == "/detokenize" ||
                            is_lora_admin_route(target);
    if (get_route || post_route) {
      ApiError e(405, "invalid_request_error",
                 "method " + std::string(req.method_string()) + " not allowed on " + target);
      e.allow = get_route ? "GET, HEAD" : "POST";
      throw e;
    }
    throw ApiError(404, "not_found_error", "no route " + target.substr(0, 200));
  }

  // ---------------------------------------------------------------- connections
  static bool expects_continue(const Request& req) {
    const auto it = req.find(http::field::expect);
    return req.version() >= 11 && it != req.end() && beast::iequals(it->value(), "100-continue");
  }

  awaitable<void> session(tcp::socket socket) {
    beast::tcp_stream stream(std::move(socket));
    auto conn = std::make_shared<Connection>(co_await net::this_coro::executor);
    conn->stream = &stream;
    {
      std::lock_guard<std::mutex> lock(conns_mu);
      conns.insert(conn);
    }
    struct Unregister {
      Impl& s;
      std::shared_ptr<Connection> c;
      ~Unregister() {
        c->stream = nullptr;
        std::lock_guard<std::mutex> lock(s.conns_mu);
        s.conns.erase(c);
      }
    } unregister{*this, conn};
    if (dropping) co_return;  // accepted just before a forced shutdown closed everything else

    beast::flat_buffer buffer;
    for (;;) {
      http::request_parser<http::string_body> parser;
      parser.body_limit(opts.max_body_bytes);
      parser.header_limit(kHeaderLimit);
      // A whole request must arrive in time: slow or stalled clients do not hold a slot.
      stream.expires_after(std::chrono::seconds(opts.request_timeout_s));
      beast::error_code ec;
      co_await http::async_read_header(stream, buffer, parser,
                                       net::redirect_error(use_awaitable, ec));
      if (!ec && !parser.is_done()) {
        // curl and others wait (about a second) for this before sending a larger body.
        if (expects_continue(parser.get()))
          co_await net::async_write(stream,
                                    net::buffer(std::string_view("HTTP/1.1 100 Continue\r\n\r\n")),
                                    net::redirect_error(use_awaitable, ec));
        if (!ec)
          co_await http::async_read(stream, buffer, parser, net::redirect_error(use_awaitable, ec));
      }
      stream.expires_never();
      if (ec == http::error::body_limit) {
        co_await respond_and_linger(
            stream,
            ApiError(413, "invalid_request_error",
                     "the request body exceeds " + std::to_string(opts.max_body_bytes) + " bytes"));
        co_return;
      }
      if (ec == http::error::header_limit) {
        co_await respond_and_linger(stream, ApiError(431, "invalid_request_error",
                                                     "the request line and headers exceed 64 KiB"));
        co_return;
      }
      if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
          ec == net::error::eof || ec == net::error::connection_reset ||
          ec == net::error::operation_aborted || ec == net::error::bad_descriptor)
        break;
      if (ec) {
        co_await respond_and_linger(stream, invalid("malformed HTTP request: " + ec.message()));
        co_return;
      }
      ++http_requests;
      struct InFlight {
        std::atomic<int>& n;
        explicit InFlight(std::atomic<int>& c) : n(c) { ++n; }
        ~InFlight() { --n; }
      } in_flight_guard(in_flight);
      const Request req = parser.release();
      bool keep = false;
      std::unique_ptr<ApiError> error;
      try {
        keep = co_await route(stream, *conn, req);
      } catch (const ApiError& e) {
        error = std::make_unique<ApiError>(e);
      } catch (const UserError& e) {
        error = std::make_unique<ApiError>(400, "invalid_request_error", e.what());
      } catch (const std::exception& e) {
        spdlog::error("request {} failed: {}", std::string(req.target()), e.what());
        error = std::make_unique<ApiError>(500, "internal_error",
                                           std::string("internal error: ") + e.what());
      }
      if (error) {
        const bool close = !req.keep_alive() || error->status == 503;
        keep = co_await respond(stream, req, error_reply(*error), !close) && !close;
      }
      if (!keep) break;
    }
    beast::error_code ec;
    stream.socket().shutdown(tcp::socket::shutdown_send, ec);
  }

  // A session must never take the server down: anything that escapes it is logged.
  static void session_done(std::exception_ptr e) {
    if (!e) return;
    try {
      std::rethrow_exception(e);
    } catch (const std::exception& x) {
      spdlog::error("connection failed: {}", x.what());
    }
  }

  awaitable<void> accept_loop() {
    for (;;) {
      auto strand = net::make_strand(ioc);
      beast::error_code ec;
      tcp::socket sock =
          co_await acceptor.async_accept(strand, net::redirect_error(use_awaitable, ec));
      if (ec) {
        if (!acceptor.is_open()) co_return;
        // Out of descriptors and the like: back off briefly instead of spinning.
        net::steady_timer t(ioc, std::chrono::milliseconds(20));
        co_await t.async_wait(net::redirect_error(use_awaitable, ec));
        continue;
      }
      // Stream chunks are small and latency is the point: no Nagle delay.
      sock.set_option(tcp::no_delay(true), ec);
      net::co_spawn(strand, session(std::move(sock)), session_done);
    }
  }

  // ---------------------------------------------------------------- shutdown
  void begin_drain() {
    if (draining.exchange(true)) return;
    beast::error_code ignored;
    acceptor.close(ignored);
    net::co_spawn(ioc, drain(), net::detached);
  }

  // Aborts every request still running and closes every connection: the requests then end at
  // once (their writes fail, the engine reports their sequences aborted) and drain completes.
  void drop_connections(const std::string& why) {
    if (dropping.exchange(true)) return;
    std::vector<std::shared_ptr<Connection>> all;
    {
      std::lock_guard<std::mutex> lock(conns_mu);
      all.assign(conns.begin(), conns.end());
    }
    spdlog::warn("{}: dropping {} open connection(s) with {} request(s) in flight", why, all.size(),
                 in_flight.load());
    for (auto& c : all)
      net::post(c->strand, [this, c] {
        if (!c->stream) return;
        if (const auto ch = c->channel) {
          if (!ch->client_gone) {
            ch->client_gone = true;
            for (uint64_t id : ch->ids) engine.abort(id);
          }
          ch->timer.cancel();
        }
        c->stream->close();
      });
  }

  awaitable<void> drain() {
    const auto deadline =
        std::chrono::steady_clock::now() + std::chrono::seconds(opts.shutdown_timeout_s);
    net::steady_timer t(ioc);
    while (in_flight.load() > 0 || engine.unfinished() > 0) {
      if (std::chrono::steady_clock::now() >= deadline)
        drop_connections("shutdown deadline of " + std::to_string(opts.shutdown_timeout_s) +
                         " s passed");
      t.expires_after(std::chrono::milliseconds(20));
      beast::error_code ec;
      co_await t.async_wait(net::redirect_error(use_awaitable, ec));
    }
    spdlog::info("drained; exiting");
    ioc.stop();
  }

  // First SIGTERM/SIGINT: drain. A second one: drop what is still running now.
  void on_signal(net::signal_set& signals, const beast::error_code& e, int sig) {
    if (e) return;
    if (!draining) {
      spdlog::info("signal {}: no new requests; finishing {} in flight (at most {} s)", sig,
                   in_flight.load(), opts.shutdown_timeout_s);
      begin_drain();
    } else {
      drop_connections("second signal " + std::to_string(sig));
    }
    signals.async_wait(
        [this, &signals](const beast::error_code& e2, int s2) { on_signal(signals, e2, s2); });
  }
};

HttpServer::HttpServer(Engine& engine, const Tokenizer& tok, const ChatTemplate& tmpl,
                       const ServerOptions& opts)
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
  if (ec)
    throw UserError("cannot listen on " + s.opts.host + ":" + std::to_string(s.opts.port) + ": " +
                    ec.message());
  const auto bound = s.acceptor.local_endpoint();
  spdlog::info("listening on http://{}:{} (model '{}', chat template {})",
               bound.address().to_string(), bound.port(), s.opts.model_name, s.tmpl.name());
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
  signals.async_wait(
      [&s, &signals](const beast::error_code& e, int sig) { s.on_signal(signals, e, sig); });
  net::co_spawn(s.ioc, s.accept_loop(), net::detached);
  std::vector<std::thread> threads;
  for (int i = 1; i < std::max(1, s.opts.io_threads); ++i)
    threads.emplace_back([&s] { s.ioc.run(); });
  s.ioc.run();
  for (auto& t : threads) t.join();
}

}  // namespace llmrun
