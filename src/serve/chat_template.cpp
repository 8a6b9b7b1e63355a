#include "serve/chat_template.h"

#include <fstream>
#include <nlohmann/json.hpp>

#include "data/tokenizer.h"
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
  return from_config(cfg);
}

ChatTemplate ChatTemplate::from_config(const nlohmann::json& cfg) {
  std::string text;
  if (cfg.contains("chat_template")) {
    const auto& t = cfg["chat_template"];
    if (t.is_string()) {
      text = t.get<std::string>();
    } else if (t.is_array()) {  // [{name, template}, ...]: the "default" one, else the first
      for (const auto& e : t)
        if (e.is_object() && e.contains("name") && e["name"] == "default" &&
            e.contains("template") && e["template"].is_string())
          text = e["template"].get<std::string>();
      if (text.empty() && !t.empty() && t[0].contains("template") && t[0]["template"].is_string())
        text = t[0]["template"].get<std::string>();
    }
  }
  if (text.find("<|im_start|>") != std::string::npos) return ChatTemplate(ChatTemplateKind::chatml);
  if (text.find("<|start_header_id|>") != std::string::npos)
    return ChatTemplate(ChatTemplateKind::llama3);
  auto token = [&](const char* key, const char* fallback) {
    const std::string t = special_token_text(cfg, key);
    return t.empty() ? std::string(fallback) : t;
  };
  const bool writes_bos = text.find("bos_token") != std::string::npos;
  auto with_tokens = [&](ChatTemplateKind kind) {
    return ChatTemplate(kind, token("bos_token", "<s>"), token("eos_token", "</s>"), writes_bos);
  };
  if (text.find("[INST]") != std::string::npos)
    return with_tokens(text.find("<<SYS>>") != std::string::npos ? ChatTemplateKind::llama2
                                                                 : ChatTemplateKind::mistral);
  if (text.find("<|user|>") != std::string::npos)
    return with_tokens(text.find("<|end|>") != std::string::npos ? ChatTemplateKind::phi3
                                                                 : ChatTemplateKind::zephyr);
  return ChatTemplate(ChatTemplateKind::plain);
}

std::string ChatTemplate::name() const {
  switch (kind_) {
    case ChatTemplateKind::chatml:
      return "chatml";
    case ChatTemplateKind::llama3:
      return "llama3";
    case ChatTemplateKind::llama2:
      return "llama2";
    case ChatTemplateKind::mistral:
      return "mistral";
    case ChatTemplateKind::phi3:
      return "phi3";
    case ChatTemplateKind::zephyr:
      return "zephyr";
    case ChatTemplateKind::plain:
      break;
  }
  return "plain";
}

std::string ChatTemplate::end_of_turn() const {
  switch (kind_) {
    case ChatTemplateKind::chatml:
      return "<|im_end|>";
    case ChatTemplateKind::llama3:
      return "<|eot_id|>";
    case ChatTemplateKind::phi3:
      return "<|end|>";
    case ChatTemplateKind::llama2:  // a turn ends with the end-of-sequence token, which stops
                                    // anyway
    case ChatTemplateKind::mistral:
    case ChatTemplateKind::zephyr:
    case ChatTemplateKind::plain:
      break;
  }
  return "";
}

std::string ChatTemplate::render(const std::vector<ChatMessage>& messages) const {
  std::string out;
  switch (kind_) {
    case ChatTemplateKind::chatml:
      for (const auto& m : messages)
        out += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      return out + "<|im_start|>assistant\n";
    case ChatTemplateKind::llama3:
      out = "<|begin_of_text|>";
      for (const auto& m : messages)
        out += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + m.content + "<|eot_id|>";
      return out + "<|start_header_id|>assistant<|end_header_id|>\n\n";
    case ChatTemplateKind::llama2:
    case ChatTemplateKind::mistral:
      return render_inst(messages);
    case ChatTemplateKind::phi3:
    case ChatTemplateKind::zephyr: {
      // "<|role|>\ncontent" + end + "\n" per message, then "<|assistant|>\n" (transformers
      // renders with trim_blocks, so only the newlines written as text remain).
      const std::string end = kind_ == ChatTemplateKind::phi3 ? "<|end|>" : eos_;
      out = writes_bos_ ? bos_ : "";
      for (const auto& m : messages)  // the templates render these three roles and skip others
        if (m.role == "system" || m.role == "user" || m.role == "assistant")
          out += "<|" + m.role + "|>\n" + m.content + end + "\n";
      return out + "<|assistant|>\n";
    }
    case ChatTemplateKind::plain:
      break;
  }
  for (const auto& m : messages) out += m.role + ": " + m.content + "\n";
  return out + "assistant:";
}

namespace {

std::string strip(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t b = s.find_first_not_of(ws);
  return b == std::string::npos ? "" : s.substr(b, s.find_last_not_of(ws) - b + 1);
}

}  // namespace

// The chat templates Meta and Mistral publish in tokenizer_config.json, written out:
//   Llama 2: <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ...
//   Mistral: <s>[INST] {user} [/INST]{assistant}</s>[INST] ...
// with the templates' own errors for roles out of order.
std::string ChatTemplate::render_inst(const std::vector<ChatMessage>& messages) const {
  const bool llama2 = kind_ == ChatTemplateKind::llama2;
  size_t first = 0;
  std::string system;
  if (llama2 && !messages.empty() && messages[0].role == "system") {
    system = messages[0].content;
    first = 1;
  }
  std::string out = llama2 ? "" : bos_;
  for (size_t i = first; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    if (m.role != "user" && m.role != "assistant")
      throw UserError("this model's chat template supports only user and assistant roles" +
                      std::string(llama2 ? " (and one system message first)" : "") + ", not '" +
                      m.role + "'");
    if ((m.role == "user") != ((i - first) % 2 == 0))
      throw UserError("conversation roles must alternate user/assistant/user/assistant/...");
    if (m.role == "user") {
      std::string content = m.content;
      if (llama2 && i == first && first == 1)
        content = "<<SYS>>\n" + system + "\n<</SYS>>\n\n" + content;
      out += llama2 ? bos_ + "[INST] " + strip(content) + " [/INST]"
                    : "[INST] " + m.content + " [/INST]";
    } else {
      out += llama2 ? " " + strip(m.content) + " " + eos_ : m.content + eos_;
    }
  }
  return out;
}

}  // namespace llmrun
