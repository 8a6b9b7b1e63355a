// `llmrun dashboard RUNS_DIR`: a browser page of every training run under a directory (live
// curves from their metrics JSONL, recipes diffed), served read-only (src/web).
#include <memory>

#include "cli/commands.h"
#include "web/dashboard_server.h"

namespace llmrun::cli {

Command add_dashboard_command(CLI::App& root) {
  auto opts = std::make_shared<DashboardOptions>();
  CLI::App* app = root.add_subcommand(
      "dashboard",
      "Serve a page of the training runs under a directory: live curves, overlays, recipe diffs");
  app->add_option("runs_dir", opts->runs_dir,
                  "Directory holding runs (their logging.metrics JSONL files)")
      ->required();
  app->add_option("--port", opts->port, "Port (0: any free one)")->check(CLI::Range(0, 65535));
  app->add_option("--host", opts->host,
                  "Address to bind; another than 127.0.0.1 shows the runs to the network");
  return {app, [opts]() {
            run_dashboard(*opts);
            return 0;
          }};
}

}  // namespace llmrun::cli
