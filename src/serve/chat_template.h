#pragma once
// Renders chat messages into the prompt text a model was trained on. Built in: ChatML and
// Llama-3, picked from the chat_template in the model dir's tokenizer_config.json by their
// marker tokens; any other model gets the plain template:
//   "<role>: <content>\n" per message, then "assistant:" for the reply.
#include <filesystem>
#include <string>
#include <vector>

namespace llmrun {

struct ChatMessage {
  std::string role, content;
};

enum class ChatTemplateKind { chatml, llama3, plain };

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateKind kind = ChatTemplateKind::plain) : kind_(kind) {}
  // Reads model_dir/tokenizer_config.json (if any) and recognises its chat_template.
  static ChatTemplate for_model_dir(const std::filesystem::path& model_dir);

  ChatTemplateKind kind() const { return kind_; }
  std::string name() const;
  std::string render(const std::vector<ChatMessage>& messages) const;
  // Text that ends an assistant turn (a default stop string for chat); empty for plain.
  std::string end_of_turn() const;

 private:
  ChatTemplateKind kind_;
};

}  // namespace llmrun
