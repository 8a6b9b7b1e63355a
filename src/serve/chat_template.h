#pragma once
// Renders chat messages into the prompt text a model was trained on. Built in: ChatML,
// Llama 3, Llama 2 ([INST] with <<SYS>>), Mistral ([INST]), Phi-3 (<|user|> ... <|end|>) and
// Zephyr/TinyLlama (<|user|> ... </s>), picked from the chat_template in the model dir's
// tokenizer_config.json by their markers; any other model gets the plain template:
//   "<role>: <content>\n" per message, then "assistant:" for the reply.
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace llmrun {

struct ChatMessage {
  std::string role, content;
};

enum class ChatTemplateKind { chatml, llama3, llama2, mistral, phi3, zephyr, plain };

class ChatTemplate {
 public:
  // bos/eos: the tokenizer_config.json token texts the templates write; Phi-3 and Zephyr
  // templates start with bos only when they say so (`writes_bos`).
  explicit ChatTemplate(ChatTemplateKind kind = ChatTemplateKind::plain, std::string bos = "<s>",
                        std::string eos = "</s>", bool writes_bos = false)
      : kind_(kind), bos_(std::move(bos)), eos_(std::move(eos)), writes_bos_(writes_bos) {}
  // Reads model_dir/tokenizer_config.json (if any) and recognises its chat_template.
  static ChatTemplate for_model_dir(const std::filesystem::path& model_dir);
  // The same from the config's JSON (a GGUF file's tokenizer.chat_template and token texts).
  static ChatTemplate from_config(const nlohmann::json& tokenizer_config);

  ChatTemplateKind kind() const { return kind_; }
  // The begin/end-of-sequence texts the template writes (tool formats write them too).
  const std::string& bos() const { return bos_; }
  const std::string& eos() const { return eos_; }
  std::string name() const;
  // UserError where the template would raise: the [INST] templates take user/assistant turns
  // alternating from a user (Llama 2 also one leading system message).
  std::string render(const std::vector<ChatMessage>& messages) const;
  // Text that ends an assistant turn (a default stop string for chat); empty for plain.
  std::string end_of_turn() const;

 private:
  std::string render_inst(const std::vector<ChatMessage>& messages) const;

  ChatTemplateKind kind_;
  std::string bos_, eos_;
  bool writes_bos_;
};

}  // namespace llmrun
