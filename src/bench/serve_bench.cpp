#include "bench/serve_bench.h"

#include <algorithm>
#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "util/error.h"
#include "util/terminal_progress.h"

namespace llmrun {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct RequestResult {
  bool ok = false;
  std::string error;
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int prompt_tokens = 0, output_tokens = 0;
};

http::response<http::string_body> simple_get(const ServeBenchOptions& o,
                                             const std::string& target) {
  net::io_context ioc;
  tcp::resolver resolver(ioc);
  beast::tcp_stream stream(ioc);
  stream.connect(resolver.resolve(o.host, std::to_string(o.port)));
  http::request<http::empty_body> req{http::verb::get, target, 11};
  req.set(http::field::host, o.host);
  http::write(stream, req);
  beast::flat_buffer buf;
  http::response<http::string_body> res;
  http::read(stream, buf, res);
  return res;
}

RequestResult one_request(const ServeBenchOptions& o, const std::string& model,
                          const std::vector<int>& prompt) {
  RequestResult r;
  try {
    net::io_context ioc;
    tcp::resolver resolver(ioc);
    beast::tcp_stream stream(ioc);
    stream.connect(resolver.resolve(o.host, std::to_string(o.port)));
    stream.socket().set_option(tcp::no_delay(true));
    const json body = {{"model", model},
                       {"prompt", prompt},
                       {"max_tokens", o.output_len},
                       {"temperature", 0},
                       {"ignore_eos", true},
                       {"stream", true},
                       {"stream_options", {{"include_usage", true}}}};
    http::request<http::string_body> req{http::verb::post, "/v1/completions", 11};
    req.set(http::field::host, o.host);
    req.set(http::field::content_type, "application/json");
    req.body() = body.dump();
    req.prepare_payload();
    const auto start = Clock::now();
    http::write(stream, req);

    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(boost::none);
    std::string pending;
    auto last = start;
    bool first = true;
    auto on_event = [&](const std::string& data) {
      if (data == "[DONE]") return;
      const json j = json::parse(data);
      if (j.contains("usage") && j["usage"].is_object()) {
        r.prompt_tokens = j["usage"].value("prompt_tokens", 0);
        r.output_tokens = j["usage"].value("completion_tokens", 0);
      }
      if (!j.contains("choices") || j["choices"].empty()) return;
      if (j["choices"][0].value("text", "").empty()) return;
      const auto now = Clock::now();
      if (first) {
        r.ttft = std::chrono::duration<double>(now - start).count();
        first = false;
      } else {
        r.itl.push_back(std::chrono::duration<double>(now - last).count());
      }
      last = now;
    };
    auto on_chunk = [&](std::uint64_t, beast::string_view data, beast::error_code&) -> std::size_t {
      pending.append(data.data(), data.size());
      size_t at;
      while ((at = pending.find("\n\n")) != std::string::npos) {
        const std::string event = pending.substr(0, at);
        pending.erase(0, at + 2);
        if (event.rfind("data: ", 0) == 0) on_event(event.substr(6));
      }
      return data.size();
    };
    parser.on_chunk_body(on_chunk);
    http::read_header(stream, buf, parser);
    if (parser.get().result() != http::status::ok) {
      http::read(stream, buf, parser);
      r.error = "HTTP " + std::to_string(parser.get().result_int()) + ": " + parser.get().body();
      return r;
    }
    while (!parser.is_done()) http::read_some(stream, buf, parser);
    r.e2e = std::chrono::duration<double>(Clock::now() - start).count();
    r.ok = !first;
    if (!r.ok) r.error = "no content received";
  } catch (const std::exception& e) {
    r.error = e.what();
  }
  return r;
}

json stats_ms(std::vector<double> v) {
  if (v.empty()) return {{"mean", 0}, {"median", 0}, {"p99", 0}};
  std::sort(v.begin(), v.end());
  double sum = 0;
  for (double x : v) sum += x;
  auto pct = [&](double p) {  // linear interpolation, as numpy.percentile
    const double idx = p / 100.0 * (v.size() - 1);
    const size_t lo = static_cast<size_t>(idx);
    const size_t hi = std::min(lo + 1, v.size() - 1);
    return (v[lo] + (v[hi] - v[lo]) * (idx - lo)) * 1e3;
  };
  return {{"mean", sum / v.size() * 1e3}, {"median", pct(50)}, {"p99", pct(99)}};
}

}  // namespace

json run_serve_bench(const ServeBenchOptions& o) {
  std::string model;
  try {
    const auto res = simple_get(o, "/v1/models");
    if (res.result() != http::status::ok)
      throw UserError("GET /v1/models answered " + std::to_string(res.result_int()));
    model = json::parse(res.body())["data"][0]["id"].get<std::string>();
  } catch (const UserError&) {
    throw;
  } catch (const std::exception& e) {
    throw UserError("cannot reach the server at http://" + o.host + ":" + std::to_string(o.port) +
                    ": " + e.what());
  }

  std::mt19937_64 rng(o.seed);
  std::vector<std::vector<int>> prompts(o.num_prompts);
  for (auto& p : prompts) {
    p.resize(o.input_len);
    for (int& t : p)
      t = 32 + static_cast<int>(rng() % 95);  // printable bytes: valid in byte-level vocabularies
  }
  std::exponential_distribution<double> gap(o.request_rate > 0 ? o.request_rate : 1.0);

  std::vector<RequestResult> results(o.num_prompts);
  std::mutex mu;
  std::condition_variable cv;
  int in_flight = 0;
  std::vector<std::thread> workers;
  TerminalProgress progress("bench serve", double(o.num_prompts), "requests");
  const auto start = Clock::now();
  auto next = start;
  for (int i = 0; i < o.num_prompts; ++i) {
    if (o.request_rate > 0) {
      next += std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(gap(rng)));
      std::this_thread::sleep_until(next);
    }
    {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return o.max_concurrency <= 0 || in_flight < o.max_concurrency; });
      ++in_flight;
    }
    workers.emplace_back([&, i] {
      results[i] = one_request(o, model, prompts[i]);
      progress.advance(1);
      std::lock_guard<std::mutex> lock(mu);
      --in_flight;
      cv.notify_all();
    });
  }
  for (auto& w : workers) w.join();
  progress.finish();
  const double duration = std::chrono::duration<double>(Clock::now() - start).count();

  std::vector<double> ttft, tpot, itl, e2e;
  int64_t completed = 0, input_tokens = 0, output_tokens = 0;
  std::string first_error;
  for (const auto& r : results) {
    if (!r.ok) {
      if (first_error.empty()) first_error = r.error;
      continue;
    }
    ++completed;
    input_tokens += r.prompt_tokens;
    output_tokens += r.output_tokens;
    ttft.push_back(r.ttft);
    e2e.push_back(r.e2e);
    if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) / (r.output_tokens - 1));
    itl.insert(itl.end(), r.itl.begin(), r.itl.end());
  }
  if (completed == 0) throw UserError("no request succeeded; first error: " + first_error);
  json out = {{"model", model},
              {"num_prompts", o.num_prompts},
              {"request_rate", o.request_rate > 0 ? json(o.request_rate) : json("inf")},
              {"max_concurrency", o.max_concurrency > 0 ? json(o.max_concurrency) : json(nullptr)},
              {"input_len", o.input_len},
              {"output_len", o.output_len},
              {"completed", completed},
              {"failed", o.num_prompts - completed},
              {"duration_s", duration},
              {"total_input_tokens", input_tokens},
              {"total_output_tokens", output_tokens},
              {"request_throughput", completed / duration},
              {"output_throughput", output_tokens / duration},
              {"total_token_throughput", (input_tokens + output_tokens) / duration},
              {"ttft_ms", stats_ms(ttft)},
              {"tpot_ms", stats_ms(tpot)},
              {"itl_ms", stats_ms(itl)},
              {"e2e_ms", stats_ms(e2e)}};
  if (!first_error.empty()) out["first_error"] = first_error;
  return out;
}

std::string format_serve_bench(const json& r) {
  std::string s;
  char line[160];
  auto row = [&](const char* name, const std::string& value) {
    std::snprintf(line, sizeof line, "%-34s %s\n", name, value.c_str());
    s += line;
  };
  auto num = [](double v, int prec = 2) {
    char b[64];
    std::snprintf(b, sizeof b, "%.*f", prec, v);
    return std::string(b);
  };
  s += "============ Serving Benchmark Result ============\n";
  row("Model:", r["model"].get<std::string>());
  row("Successful requests:", std::to_string(r["completed"].get<int64_t>()));
  row("Failed requests:", std::to_string(r["failed"].get<int64_t>()));
  row("Max concurrency:",
      r["max_concurrency"].is_null() ? "unlimited" : r["max_concurrency"].dump());
  row("Request rate (req/s):",
      r["request_rate"].is_string() ? "inf" : num(r["request_rate"].get<double>()));
  row("Benchmark duration (s):", num(r["duration_s"].get<double>()));
  row("Total input tokens:", std::to_string(r["total_input_tokens"].get<int64_t>()));
  row("Total generated tokens:", std::to_string(r["total_output_tokens"].get<int64_t>()));
  row("Request throughput (req/s):", num(r["request_throughput"].get<double>()));
  row("Output token throughput (tok/s):", num(r["output_throughput"].get<double>()));
  row("Total token throughput (tok/s):", num(r["total_token_throughput"].get<double>()));
  for (const auto& [key, title] : std::vector<std::pair<std::string, std::string>>{
           {"ttft_ms", "Time to First Token"},
           {"tpot_ms", "Time per Output Token (excl. 1st token)"},
           {"itl_ms", "Inter-token Latency"},
           {"e2e_ms", "End-to-end Latency"}}) {
    s += "---------- " + title + " ----------\n";
    const std::string base = key.substr(0, key.size() - 3);
    row(("Mean " + base + " (ms):").c_str(), num(r[key]["mean"].get<double>()));
    row(("Median " + base + " (ms):").c_str(), num(r[key]["median"].get<double>()));
    row(("P99 " + base + " (ms):").c_str(), num(r[key]["p99"].get<double>()));
  }
  s += "==================================================\n";
  return s;
}

}  // namespace llmrun
