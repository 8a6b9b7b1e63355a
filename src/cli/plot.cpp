#include <spdlog/spdlog.h>

#include <algorithm>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "plot/curves_chart.h"
#include "plot/metrics_log.h"
#include "plot/png_render.h"
#include "util/atomic_dir.h"
#include "util/error.h"

namespace llmrun::cli {

namespace {
struct PlotArgs {
  std::vector<std::string> inputs;
  std::string output;
  ChartOptions chart;
};

std::string lower_extension(const std::string& path) {
  std::string ext = std::filesystem::path(path).extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(),
                 [](unsigned char c) { return char(std::tolower(c)); });
  return ext;
}

int run_plot(const PlotArgs& a) {
  const std::string ext = lower_extension(a.output);
  if (ext != ".svg" && ext != ".png")
    throw UserError("-o " + a.output +
                    ": the picture format comes from the extension; use .svg or .png");
  const auto parent = std::filesystem::path(a.output).parent_path();
  std::error_code ec;
  if (!parent.empty() && !std::filesystem::is_directory(parent, ec))
    throw UserError("-o " + a.output + ": directory " + parent.string() + " does not exist");

  std::vector<MetricsLog> logs;
  for (const auto& in : a.inputs)
    logs.push_back(read_metrics_log(in));  // every input read before writing
  const std::string svg = render_curves_svg(logs, a.chart);
  if (ext == ".svg")
    write_file_atomic(a.output, svg);
  else
    write_png_from_svg(svg, a.output);
  size_t points = 0;
  for (const auto& l : logs) points += l.loss.size();
  spdlog::info("wrote {} ({} file{}, {} logged steps)", a.output, logs.size(),
               logs.size() == 1 ? "" : "s", points);
  return 0;
}
}  // namespace

Command add_plot_command(CLI::App& root) {
  auto args = std::make_shared<PlotArgs>();
  CLI::App* app = root.add_subcommand(
      "plot",
      "Draw loss (and val_loss), tokens/s and MFU against step from training metrics JSONL files");
  app->add_option("metrics", args->inputs,
                  "Metrics JSONL files (logging.metrics); several are overlaid")
      ->required();
  app->add_option("-o,--output", args->output,
                  "Picture to write: .svg, or .png (rendered with rsvg-convert)")
      ->required();
  app->add_option("--title", args->chart.title, "Title above the panels");
  app->add_option("--width", args->chart.width, "Picture width in pixels")
      ->check(CLI::Range(300, 10000));
  return {app, [args]() { return run_plot(*args); }};
}

}  // namespace llmrun::cli
