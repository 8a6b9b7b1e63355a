// Request path -> embedded page file (the table itself is generated: cmake/embed_web.cmake).
#include "web/web_assets.h"

#include <string>

namespace llmrun {

const WebAsset* find_web_asset(std::string_view app, std::string_view target) {
  if (target.empty() || target[0] != '/') return nullptr;
  std::string path;
  if (target == "/")
    path = std::string(app) + "/index.html";
  else if (target.starts_with("/shared/"))
    path = std::string(target.substr(1));
  else
    path = std::string(app) + std::string(target);
  for (size_t i = 0; i < kWebAssetCount; ++i)
    if (kWebAssets[i].path == path) return &kWebAssets[i];
  return nullptr;
}

}  // namespace llmrun
