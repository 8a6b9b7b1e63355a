#pragma once
// `llmrun dashboard`'s HTTP server: the dashboard page (web/dashboard) and two read-only JSON
// endpoints over a runs directory. Blocking Boost.Beast, a thread per connection: a handful
// of browser tabs is its whole load, and it never writes a file.
//   GET /api/runs                      {"root", "runs": [{id, name, size, modified, recipe,
//   recipe_source}]} GET /api/metrics?run=ID&offset=N   {"offset", "reset", "records": [...]}
//   (run_files.h)
#include <string>

namespace llmrun {

struct DashboardOptions {
  std::string runs_dir;
  std::string host = "127.0.0.1";
  int port = 6006;  // 0: any free port (the bound one is printed)
};

// Binds, prints "dashboard of DIR on http://HOST:PORT", and serves until the process ends.
void run_dashboard(const DashboardOptions& opts);

}  // namespace llmrun
