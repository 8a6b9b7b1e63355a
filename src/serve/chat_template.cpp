#include "serve/chat_template.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "util/error.h"

namespace llmrun {

ChatTemplate ChatTemplate::for_model_dir(const std::filesystem::path& model_dir) {
  const auto path = model_dir / "tokenizer_config.json";
  std::ifstream in(path);
  if (!in) return ChatTemplate(ChatTemplateKind::plain);
  nlohmann::json cfg;
  try {
    cfg = nlohmann::json::parse(in);
  } catch (const std::exception& e) {
    throw UserError(path.string() + ": not valid JSON (" + e.what() + ")");
  }
  std::string text;
  if (cfg.contains("chat_template")) {
    const auto& t = cfg["chat_template"];
    if (t.is_string()) {
      text = t.get<std::string>();
    } else if (t.is_array()) {  // [{name, template}, ...]: the "default" one, else the first
      for (const auto& e : t)
        if (e.is_object() && e.value("name", "") == "default" && e.contains("template") && e["template"].is_string())
          text = e["template"].get<std::string>();
      if (text.empty() && !t.empty() && t[0].contains("template") && t[0]["template"].is_string())
        text = t[0]["template"].get<std::string>();
    }
  }
  if (text.find("<|im_start|>") != std::string::npos) return ChatTemplate(ChatTemplateKind::chatml);
  if (text.find("<|start_header_id|>") != std::string::npos) return ChatTemplate(ChatTemplateKind::llama3);
  return ChatTemplate(ChatTemplateKind::plain);
}

std::string ChatTemplate::name() const {
  switch (kind_) {
    case ChatTemplateKind::chatml: return "chatml";
    case ChatTemplateKind::llama3: return "llama3";
    case ChatTemplateKind::plain: break;
  }
  return "plain";
}

std::string ChatTemplate::end_of_turn() const {
  switch (kind_) {
    case ChatTemplateKind::chatml: return "<|im_end|>";
    case ChatTemplateKind::llama3: return "<|eot_id|>";
    case ChatTemplateKind::plain: break;
  }
  return "";
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  std::string out;
  switch (kind_) {
    case ChatTemplateKind::chatml:
      for (const auto& m : messages) out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return out + "<|im_start|>assistant\n";
    case ChatTemplateKind::llama3:
      out = "<|begin_of_text|>";
      for (const auto& m : messages)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatTemplateKind::plain:
      break;
  }
  for (const auto& m : messages) out += m.role + ": " + m.content + "\n";
  return out + "assistant:";
}

}  // namespace llmrun
