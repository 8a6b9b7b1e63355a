#include "plot/curves_chart.h"

#include <algorithm>
#include <filesystem>
#include <limits>
#include <set>

#include "plot/axis_ticks.h"
#include "plot/svg_document.h"

namespace llmrun {

namespace {

// Tableau-10: distinguishable, also for common colour blindness.
const char* const kColors[] = {"#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f",
                               "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"};

struct PlotSeries {
  const Series* points;
  double scale;          // MFU is stored as a fraction and drawn in percent
  std::string label;     // legend text and data-series attribute
  std::string quantity;  // data-quantity attribute
  const char* color;
  const char* dash;
};

struct Panel {
  std::string title, y_label;
  std::vector<PlotSeries> series;
};

constexpr double kLeft = 80, kRight = 24, kPanelTop = 34, kPanelBottom = 46, kGap = 14;

void draw_panel(SvgDocument& svg, const Panel& p, double top, const ChartOptions& o,
                const AxisTicks& xt) {
  const double x0 = kLeft, x1 = o.width - kRight;
  const double y0 = top + kPanelTop, y1 = top + o.panel_height - kPanelBottom;

  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const auto& s : p.series)
    for (const auto& [step, v] : *s.points) {
      lo = std::min(lo, v * s.scale);
      hi = std::max(hi, v * s.scale);
    }
  const AxisTicks yt = nice_ticks(lo, hi, 5);
  auto px = [&](double step) { return x0 + (step - xt.lo) / (xt.hi - xt.lo) * (x1 - x0); };
  auto py = [&](double v) { return y1 - (v - yt.lo) / (yt.hi - yt.lo) * (y1 - y0); };

  svg.text(x0, top + 22, p.title, SvgDocument::Anchor::start, 14, 0, "bold");
  svg.rect(x0, y0, x1 - x0, y1 - y0, "none", "#444444");
  for (double v : yt.values) {
    const double y = py(v);
    if (v != yt.lo && v != yt.hi) svg.line(x0, y, x1, y, "#e5e5e5");
    svg.line(x0 - 5, y, x0, y, "#444444");
    svg.text(x0 - 8, y + 4, format_tick(v, yt), SvgDocument::Anchor::end, 11);
  }
  for (double v : xt.values) {
    const double x = px(v);
    if (v != xt.lo && v != xt.hi) svg.line(x, y0, x, y1, "#f0f0f0");
    svg.line(x, y1, x, y1 + 5, "#444444");
    svg.text(x, y1 + 18, format_tick(v, xt), SvgDocument::Anchor::middle, 11);
  }
  svg.text(x0 - 58, (y0 + y1) / 2, p.y_label, SvgDocument::Anchor::middle, 12, -90);
  svg.text((x0 + x1) / 2, y1 + 36, "step", SvgDocument::Anchor::middle, 12);

  for (const auto& s : p.series) {
    std::vector<std::pair<double, double>> pts;
    for (const auto& [step, v] : *s.points) pts.emplace_back(px(step), py(v * s.scale));
    svg.polyline(pts, s.color, 1.8, s.dash, s.label, s.quantity);
    if (pts.size() == 1)
      svg.circle(pts[0].first, pts[0].second, 3, s.color);  // a lone point draws no line
  }

  if (p.series.size() > 1) {
    // Legend in the top-right corner, one row per series, sample line in its colour and dash.
    size_t longest = 0;
    for (const auto& s : p.series) longest = std::max(longest, s.label.size());
    const double w = 40 + 6.5 * double(longest), row = 16;
    const double lx = x1 - w - 8, ly = y0 + 8;
    svg.rect(lx, ly, w, row * double(p.series.size()) + 8, "white", "#bbbbbb");
    for (size_t i = 0; i < p.series.size(); ++i) {
      const double y = ly + 12 + row * double(i);
      svg.line(lx + 6, y - 4, lx + 30, y - 4, p.series[i].color, 2, p.series[i].dash);
      svg.text(lx + 36, y, p.series[i].label, SvgDocument::Anchor::start, 11);
    }
  }
}

}  // namespace

std::vector<std::string> distinct_labels(const std::vector<std::string>& paths) {
  std::vector<std::vector<std::string>> parts;
  size_t deepest = 1;
  for (const auto& p : paths) {
    std::vector<std::string> comps;
    for (const auto& c : std::filesystem::path(p).lexically_normal()) comps.push_back(c.string());
    deepest = std::max(deepest, comps.size());
    parts.push_back(std::move(comps));
  }
  for (size_t k = 1; k <= deepest; ++k) {
    std::vector<std::string> labels;
    for (const auto& comps : parts) {
      std::filesystem::path tail;
      for (size_t i = comps.size() > k ? comps.size() - k : 0; i < comps.size(); ++i)
        tail /= comps[i];
      labels.push_back(tail.string());
    }
    if (std::set<std::string>(labels.begin(), labels.end()).size() == labels.size()) return labels;
  }
  return paths;  // the same file given twice: nothing tells them apart
}

std::string render_curves_svg(const std::vector<MetricsLog>& logs, const ChartOptions& o) {
  std::vector<std::string> paths;
  for (const auto& l : logs) paths.push_back(l.path);
  const std::vector<std::string> names = distinct_labels(paths);
  const bool several = logs.size() > 1;

  Panel loss{"Loss", "loss", {}}, tps{"Throughput", "tokens/s", {}},
      mfu{"Model FLOPs utilisation", "MFU (%)", {}};
  for (size_t i = 0; i < logs.size(); ++i) {
    const MetricsLog& l = logs[i];
    const char* color = kColors[i % std::size(kColors)];
    const std::string prefix = several ? names[i] + " " : "";
    if (!l.loss.empty()) loss.series.push_back({&l.loss, 1, prefix + "loss", "loss", color, ""});
    if (!l.val_loss.empty())
      loss.series.push_back({&l.val_loss, 1, prefix + "val_loss", "val_loss", color, "6 4"});
    const std::string name = several ? names[i] : "";
    if (!l.tokens_per_s.empty())
      tps.series.push_back({&l.tokens_per_s, 1, name, "tokens_per_s", color, ""});
    if (!l.mfu.empty()) mfu.series.push_back({&l.mfu, 100, name, "mfu", color, ""});
  }
  std::vector<const Panel*> panels;
  for (const Panel* p : {&loss, &tps, &mfu})
    if (!p->series.empty()) panels.push_back(p);

  double first = std::numeric_limits<double>::infinity(), last = -first;
  for (const Panel* p : panels)
    for (const auto& s : p->series)
      for (const auto& pt : *s.points) {
        first = std::min(first, pt.first);
        last = std::max(last, pt.first);
      }
  const AxisTicks xt = nice_ticks(first, last, 8, true);

  const double title_h = o.title.empty() ? 0 : 30;
  SvgDocument svg(o.width, title_h + double(panels.size()) * (o.panel_height + kGap));
  if (!o.title.empty())
    svg.text(o.width / 2, 22, o.title, SvgDocument::Anchor::middle, 16, 0, "bold");
  for (size_t i = 0; i < panels.size(); ++i)
    draw_panel(svg, *panels[i], title_h + double(i) * (o.panel_height + kGap), o, xt);
  return svg.str();
}

}  // namespace llmrun
