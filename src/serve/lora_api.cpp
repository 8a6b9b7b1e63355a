// The LoRA adapter routes and /v1/models entries (see the header).
#include "serve/lora_api.h"

#include "serve/openai_api.h"
#include "util/error.h"

namespace llmrun {

using json = nlohmann::json;

namespace {
std::string field(const json& body, const char* name) {
  if (!body.contains(name)) throw invalid(std::string("'") + name + "' is required", name);
  if (!body[name].is_string() || body[name].get<std::string>().empty())
    throw invalid(std::string("'") + name + "' must be a non-empty string, got " + echo(body[name]),
                  name);
  return body[name].get<std::string>();
}
}  // namespace

bool is_lora_admin_route(const std::string& target) {
  return target == "/v1/load_lora_adapter" || target == "/v1/unload_lora_adapter";
}

std::string lora_admin(const std::string& target, const std::string& body_text,
                       LoraRegistry* loras) {
  if (loras == nullptr)
    throw invalid("this server runs without LoRA support: start it with --enable-lora or --lora");
  const json body = parse_body(body_text);
  if (!body.is_object()) throw invalid("the request body must be a JSON object");
  const std::string name = field(body, "lora_name");
  if (target == "/v1/unload_lora_adapter") {
    if (!loras->unload(name))
      throw ApiError(404, "not_found_error", "the LoRA adapter '" + name + "' is not loaded",
                     "lora_name");
    return "Success: LoRA adapter '" + name + "' removed successfully.";
  }
  const std::string path = field(body, "lora_path");
  try {
    loras->load(name, path);
  } catch (const std::exception& e) {  // a bad adapter: refused, the server keeps serving
    throw invalid(e.what(), "lora_path");
  }
  return "Success: LoRA adapter '" + name + "' added successfully.";
}

json lora_model_cards(const LoraRegistry& loras, int max_model_len) {
  json cards = json::array();
  for (const auto& l : loras.list())
    cards.push_back({{"id", l->name()},
                     {"object", "model"},
                     {"created", 0},
                     {"owned_by", "llmrun"},
                     {"root", l->path().string()},
                     {"parent", loras.base_name()},
                     {"max_model_len", max_model_len}});
  return cards;
}

}  // namespace llmrun
