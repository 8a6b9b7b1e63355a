#pragma once
// The OpenAI wire format: parsing /v1/completions and /v1/chat/completions bodies into engine
// work (with the range checks that turn into 400s), and building response objects and
// stream chunks from engine events.
#include <nlohmann/json.hpp>
#include <stdexcept>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "serve/chat_template.h"
#include "serve/request.h"

namespace llmrun {

// An error answered with an OpenAI-style body {"error": {message, type, param, code}}.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message, std::string param = "")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)) {}
  int status;
  std::string type, param;
};
nlohmann::json error_body(const ApiError& e);
// Shorthand for the common 400.
ApiError invalid(const std::string& message, const std::string& param = "");

struct ApiContext {
  const Tokenizer& tok;
  const ChatTemplate& chat_template;
  std::string model_name;
  int max_model_len;
  int vocab;
};

struct CompletionJob {
  bool chat = false, stream = false, include_usage = false;
  std::vector<std::vector<int32_t>> prompts;  // completions may carry several
  int n = 1;
  GenerationParams params;                    // choice i of a prompt uses seed + i
  bool logprobs = false;
  int top_logprobs = 0;
  int sequences() const { return static_cast<int>(prompts.size()) * n; }
};

CompletionJob parse_completion_request(const nlohmann::json& body, bool chat, const ApiContext& ctx);
// Chat messages -> prompt text with the model's template (for /tokenize too).
std::string render_chat(const nlohmann::json& messages, const ChatTemplate& tmpl);

// Builds the response objects. One per request; choice index = prompt * n + i.
class ResponseBuilder {
 public:
  ResponseBuilder(const CompletionJob& job, const ApiContext& ctx);
  // Stream: the chunk(s) for one event of choice `index` (chat: the first also carries the
  // role). Returns chunk objects to send as "data: ..." lines.
  std::vector<nlohmann::json> stream_chunks(int index, const SequenceEvent& ev);
  nlohmann::json usage_chunk() const;
  // Non-stream: accumulate, then the final object.
  void add(int index, const SequenceEvent& ev);
  nlohmann::json final_response() const;

 private:
  nlohmann::json base(const char* object) const;
  nlohmann::json logprobs_json(const std::vector<TokenLogprob>& lps, size_t text_offset) const;
  nlohmann::json usage() const;

  const CompletionJob& job_;
  const ApiContext& ctx_;
  std::string id_;
  int64_t created_;
  struct Choice {
    std::string text, finish_reason;
    std::vector<TokenLogprob> logprobs;
    bool role_sent = false;
  };
  std::vector<Choice> choices_;
  int prompt_tokens_ = 0, completion_tokens_ = 0, cached_tokens_ = 0;
  std::vector<bool> prompt_counted_;
};

}  // namespace llmrun
