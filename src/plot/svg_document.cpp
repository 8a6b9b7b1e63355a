#include "plot/svg_document.h"

#include <cstdio>

namespace llmrun {

namespace {
// Six significant digits are far below a pixel; fixed 2 decimals keeps files small and diffable.
std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f", v);
  return buf;
}
}  // namespace

std::string xml_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        // Control characters other than tab/newline are not allowed in XML 1.0 at all.
        if (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n')
          out += '?';
        else
          out += c;
    }
  }
  return out;
}

SvgDocument::SvgDocument(double width, double height) : width_(width), height_(height) {}

// Elements are built by appending, attribute by attribute: one `a + b + c` chain per element
// trips GCC 12's -Wrestrict false positive in std::string's operator+.
void SvgDocument::attr(std::string_view name, std::string_view value) {
  body_ += ' ';
  body_ += name;
  body_ += "=\"";
  body_ += value;
  body_ += '"';
}

void SvgDocument::attr(std::string_view name, double value) { attr(name, num(value)); }

void SvgDocument::rect(double x, double y, double w, double h, std::string_view fill,
                       std::string_view stroke) {
  body_ += "<rect";
  attr("x", x);
  attr("y", y);
  attr("width", w);
  attr("height", h);
  attr("fill", fill);
  attr("stroke", stroke);
  body_ += "/>\n";
}

void SvgDocument::line(double x1, double y1, double x2, double y2, std::string_view stroke,
                       double width, std::string_view dash) {
  body_ += "<line";
  attr("x1", x1);
  attr("y1", y1);
  attr("x2", x2);
  attr("y2", y2);
  attr("stroke", stroke);
  attr("stroke-width", width);
  if (!dash.empty()) attr("stroke-dasharray", dash);
  body_ += "/>\n";
}

void SvgDocument::text(double x, double y, std::string_view content, Anchor anchor, double size,
                       double rotate_deg, std::string_view weight) {
  static const char* anchors[] = {"start", "middle", "end"};
  body_ += "<text";
  attr("x", x);
  attr("y", y);
  attr("font-size", size);
  attr("text-anchor", anchors[static_cast<int>(anchor)]);
  attr("font-weight", weight);
  if (rotate_deg != 0) {
    std::string t = "rotate(";
    t += num(rotate_deg);
    t += ' ';
    t += num(x);
    t += ' ';
    t += num(y);
    t += ')';
    attr("transform", t);
  }
  body_ += '>';
  body_ += xml_escape(content);
  body_ += "</text>\n";
}

void SvgDocument::polyline(const std::vector<std::pair<double, double>>& points,
                           std::string_view stroke, double width, std::string_view dash,
                           std::string_view series_label, std::string_view quantity) {
  body_ += "<polyline";
  attr("class", "series");
  attr("data-series", xml_escape(series_label));
  attr("data-quantity", xml_escape(quantity));
  attr("fill", "none");
  attr("stroke", stroke);
  attr("stroke-width", width);
  attr("stroke-linejoin", "round");
  if (!dash.empty()) attr("stroke-dasharray", dash);
  std::string pts;
  for (size_t i = 0; i < points.size(); ++i) {
    if (i) pts += ' ';
    pts += num(points[i].first);
    pts += ',';
    pts += num(points[i].second);
  }
  attr("points", pts);
  body_ += "/>\n";
}

void SvgDocument::circle(double cx, double cy, double r, std::string_view fill) {
  body_ += "<circle";
  attr("cx", cx);
  attr("cy", cy);
  attr("r", r);
  attr("fill", fill);
  body_ += "/>\n";
}

std::string SvgDocument::str() const {
  std::string out =
      "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<svg xmlns=\"http://www.w3.org/2000/svg\"";
  const std::string w = num(width_), h = num(height_);
  out += " width=\"" + w + "\" height=\"" + h + "\" viewBox=\"0 0 " + w + " " + h + "\"";
  out += " font-family=\"DejaVu Sans, Helvetica, Arial, sans-serif\">\n";
  out += "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  out += body_;
  out += "</svg>\n";
  return out;
}

}  // namespace llmrun
