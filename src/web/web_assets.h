#pragma once
// The browser pages (web/ in the source tree: the serve playground, the run dashboard),
// built into the binary by cmake/embed_web.cmake so that llmrun serves them with no files
// beside it and no network access.
#include <cstddef>
#include <string_view>

namespace llmrun {

struct WebAsset {
  std::string_view path;  // relative to web/, e.g. "playground/index.html"
  std::string_view content_type;
  std::string_view body;
};

extern const WebAsset kWebAssets[];
extern const size_t kWebAssetCount;

// The file a GET of `target` (path only, no query) fetches from page `app` ("playground",
// "dashboard"): "/" is APP/index.html, "/shared/NAME" is shared/NAME (what both pages use),
// "/NAME" is APP/NAME. nullptr when there is none.
const WebAsset* find_web_asset(std::string_view app, std::string_view target);

}  // namespace llmrun
