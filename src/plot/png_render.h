#pragma once
// PNG output: the SVG rendered by librsvg's rsvg-convert (Debian librsvg2-bin), so the
// picture is the same one the SVG route draws.
#include <string>

namespace llmrun {

// Renders `svg` to `png_path` atomically (a temporary sibling, renamed when complete).
// Throws UserError when rsvg-convert is not installed (saying how to get it or to use .svg)
// or fails.
void write_png_from_svg(const std::string& svg, const std::string& png_path);

}  // namespace llmrun
