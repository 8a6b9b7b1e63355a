#pragma once
// src/plot owns `llmrun plot`: reading the trainer's metrics JSONL into series, laying
// them out as panels with axes and legends, and writing them as SVG (our own small writer,
// no dependency) or PNG (the SVG rendered by librsvg's rsvg-convert).
#include <string>
#include <string_view>
#include <vector>

namespace llmrun {

// Accumulates SVG elements in document order; coordinates are user units (pixels).
class SvgDocument {
 public:
  SvgDocument(double width, double height);

  void rect(double x, double y, double w, double h, std::string_view fill, std::string_view stroke);
  void line(double x1, double y1, double x2, double y2, std::string_view stroke, double width = 1,
            std::string_view dash = "");
  enum class Anchor { start, middle, end };
  // rotate_deg turns the text around its anchor point (y-axis labels use -90).
  void text(double x, double y, std::string_view content, Anchor anchor = Anchor::start,
            double size = 12, double rotate_deg = 0, std::string_view weight = "normal");
  // One data series; class="series", data-series and data-quantity name it for whoever reads the
  // file.
  void polyline(const std::vector<std::pair<double, double>>& points, std::string_view stroke,
                double width, std::string_view dash, std::string_view series_label,
                std::string_view quantity);
  void circle(double cx, double cy, double r, std::string_view fill);

  std::string str() const;  // the complete document

 private:
  void attr(std::string_view name, std::string_view value);
  void attr(std::string_view name, double value);

  double width_, height_;
  std::string body_;
};

// Escapes &, <, >, " and ' for use in text and attribute values.
std::string xml_escape(std::string_view s);

}  // namespace llmrun
