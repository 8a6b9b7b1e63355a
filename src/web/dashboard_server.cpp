// The dashboard's read-only HTTP server (see dashboard_server.h).
#include "web/dashboard_server.h"

#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <boost/asio.hpp>
#include <boost/beast.hpp>
#include <charconv>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <thread>
#include <utility>  // std::exchange, which Boost.Asio's awaitable.hpp uses

#include "util/error.h"
#include "web/run_files.h"
#include "web/web_assets.h"

namespace llmrun {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;

namespace {

using Request = http::request<http::string_body>;
using Response = http::response<http::string_body>;

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

// The value of `key` in a query string, %XX and '+' decoded.
std::string query_param(std::string_view query, std::string_view key) {
  size_t pos = 0;
  while (pos <= query.size()) {
    size_t amp = query.find('&', pos);
    if (amp == std::string_view::npos) amp = query.size();
    const std::string_view pair = query.substr(pos, amp - pos);
    const size_t eq = pair.find('=');
    if (pair.substr(0, eq) == key && eq != std::string_view::npos) {
      std::string out;
      for (size_t i = eq + 1; i < pair.size(); ++i) {
        int hex = 0;
        if (pair[i] == '%' && i + 2 < pair.size() &&
            std::from_chars(pair.data() + i + 1, pair.data() + i + 3, hex, 16).ptr ==
                pair.data() + i + 3) {
          out.push_back(char(hex));
          i += 2;
        } else {
          out.push_back(pair[i] == '+' ? ' ' : pair[i]);
        }
      }
      return out;
    }
    pos = amp + 1;
  }
  return "";
}

Response answer(const Request& req, const DashboardOptions& opts) {
  Response res{http::status::ok, req.version()};
  res.set(http::field::server, "llmrun");
  res.keep_alive(req.keep_alive());
  auto reply = [&](http::status st, const std::string& body, std::string_view type) {
    res.result(st);
    res.set(http::field::content_type, std::string(type));
    res.set(http::field::cache_control, "no-store");
    res.body() = body;
    res.prepare_payload();
    return res;
  };
  auto error = [&](http::status st, const std::string& message) {
    return reply(st, dump({{"error", {{"message", message}}}}), "application/json");
  };
  const std::string_view target(req.target().data(), req.target().size());
  const size_t q = target.find('?');
  const std::string_view path = target.substr(0, q);
  const std::string_view query =
      q == std::string_view::npos ? std::string_view() : target.substr(q + 1);
  if (req.method() != http::verb::get && req.method() != http::verb::head)
    return error(http::status::method_not_allowed, "the dashboard is read-only: GET only");
  try {
    if (path == "/api/runs") {
      json runs = json::array();
      for (const RunFile& r : find_runs(opts.runs_dir))
        runs.push_back({{"id", r.id},
                        {"name", r.name},
                        {"size", r.size},
                        {"modified", r.modified},
                        {"recipe", r.recipe},
                        {"recipe_source", r.recipe_source}});
      return reply(http::status::ok, dump({{"root", opts.runs_dir}, {"runs", runs}}),
                   "application/json");
    }
    if (path == "/api/metrics") {
      uintmax_t offset = 0;
      const std::string off = query_param(query, "offset");
      if (!off.empty() && std::from_chars(off.data(), off.data() + off.size(), offset).ptr !=
                              off.data() + off.size())
        return error(http::status::bad_request, "offset '" + off + "' is not a byte count");
      const MetricsChunk c = read_metrics_from(opts.runs_dir, query_param(query, "run"), offset);
      return reply(http::status::ok,
                   dump({{"offset", c.offset}, {"reset", c.reset}, {"records", c.records}}),
                   "application/json");
    }
    if (const WebAsset* page = find_web_asset("dashboard", path))
      return reply(http::status::ok, std::string(page->body), page->content_type);
  } catch (const UserError& e) {
    return error(http::status::not_found, e.what());
  }
  return error(http::status::not_found, "no route " + std::string(path));
}

void serve_connection(tcp::socket socket, const DashboardOptions& opts) {
  // An idle keep-alive connection gives its thread back after a minute.
  const timeval tv{60, 0};
  setsockopt(socket.native_handle(), SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  beast::flat_buffer buffer;
  for (;;) {
    http::request_parser<http::string_body> parser;
    parser.body_limit(64 * 1024);
    beast::error_code ec;
    http::read(socket, buffer, parser, ec);
    if (ec) break;
    const Request req = parser.release();
    Response res;
    try {
      res = answer(req, opts);
    } catch (const std::exception& e) {
      spdlog::error("{}: {}", std::string(req.target()), e.what());
      res = Response{http::status::internal_server_error, req.version()};
      res.body() = dump({{"error", {{"message", std::string("internal error: ") + e.what()}}}});
      res.prepare_payload();
    }
    if (req.method() == http::verb::head) res.body().clear();
    http::write(socket, res, ec);
    if (ec || !res.keep_alive()) break;
  }
  beast::error_code ec;
  socket.shutdown(tcp::socket::shutdown_both, ec);
}

}  // namespace

void run_dashboard(const DashboardOptions& opts) {
  std::error_code fec;
  if (!std::filesystem::is_directory(opts.runs_dir, fec))
    throw UserError(opts.runs_dir + " is not a directory");
  net::io_context ioc;
  beast::error_code ec;
  const auto address = net::ip::make_address(opts.host, ec);
  if (ec) throw UserError("--host '" + opts.host + "' is not an IP address");
  tcp::acceptor acceptor(ioc);
  const tcp::endpoint ep(address, static_cast<unsigned short>(opts.port));
  acceptor.open(ep.protocol(), ec);
  if (!ec) acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) acceptor.bind(ep, ec);
  if (!ec) acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    throw UserError("cannot listen on " + opts.host + ":" + std::to_string(opts.port) + ": " +
                    ec.message());
  const auto bound = acceptor.local_endpoint();
  spdlog::info("dashboard of {} on http://{}:{}", opts.runs_dir, bound.address().to_string(),
               bound.port());
  for (;;) {
    tcp::socket socket(ioc);
    acceptor.accept(socket, ec);
    if (ec) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));  // out of descriptors: back off
      continue;
    }
    std::thread(serve_connection, std::move(socket), std::cref(opts)).detach();
  }
}

}  // namespace llmrun
