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
#include "serve/lora_registry.h"
#include "serve/request.h"
#include "serve/structured/token_mask.h"
#include "serve/tool_calls.h"
#include "serve/tool_calls_stream.h"

namespace llmrun {

// An error answered with an OpenAI-style body {"error": {message, type, param, code}}.
struct ApiError : std::runtime_error {
  ApiError(int status, std::string type, const std::string& message, std::string param = "")
      : std::runtime_error(message),
        status(status),
        type(std::move(type)),
        param(std::move(param)) {}
  int status;
  std::string type, param;
  int retry_after_s = 0;  // > 0: sent as Retry-After (429: when capacity may have freed up)
  std::string allow;      // 405: the methods the route takes, sent as Allow
};
nlohmann::json error_body(const ApiError& e);
// Shorthand for the common 400.
ApiError invalid(const std::string& message, const std::string& param = "");

// Request bodies may nest JSON at most this deep. nlohmann's dump, copy and comparison recurse
// once per level, so a 200 KB body of "[[[[..." would overflow the stack wherever the server
// reads or echoes that value; no OpenAI request needs more than a few levels.
inline constexpr int kMaxJsonDepth = 64;
// Parses a request body: 400 (naming the top-level field) when it nests deeper than
// kMaxJsonDepth, 400 when it is not JSON. The depth is checked before nlohmann sees the text.
nlohmann::json parse_body(const std::string& text);
// A client value for an error message: its JSON text, cut to a readable length.
std::string echo(const nlohmann::json& v);

struct ApiContext {
  const Tokenizer& tok;
  const ChatTemplate& chat_template;
  std::string model_name;
  int max_model_len;
  int vocab;
  // Compiled grammars for structured output; null: response_format and guided_* are refused.
  structured::ConstraintCache* constraints = nullptr;
  // Multi-LoRA serving: the adapters a request's 'model' may name; null: the base only.
  LoraRegistry* loras = nullptr;
};

struct CompletionJob {
  bool chat = false, stream = false, include_usage = false;
  std::vector<std::vector<int32_t>> prompts;  // completions may carry several
  int n = 1;
  GenerationParams params;  // choice i of a prompt uses seed + i
  bool logprobs = false;
  int top_logprobs = 0;
  ToolRequest tools;  // chat: the request's tools and tool_choice
  std::string model;  // the requested model: the base's name or a LoRA adapter's
  int sequences() const { return static_cast<int>(prompts.size()) * n; }
};

// `a` as token ids below `vocab`; 400 naming `param` for anything else.
std::vector<int32_t> token_ids(const nlohmann::json& a, int vocab, const char* param);
CompletionJob parse_completion_request(const nlohmann::json& body, bool chat,
                                       const ApiContext& ctx);
// response_format / guided_json / guided_regex / guided_choice / guided_grammar -> the
// request's compiled grammar (null when it asks for none); 400 for a bad or unsupported one.
// A forced tool call (tool_choice required or named, `tools`) is such a grammar too.
std::shared_ptr<structured::CompiledConstraint> parse_constraint(
    const nlohmann::json& body, const ApiContext& ctx, int max_tokens,
    const ToolRequest* tools = nullptr);
// Chat messages -> prompt text with the model's template (for /tokenize too); with `tools`,
// tool definitions, calls and results in the template family's format (tool_calls.h).
std::string render_chat(const nlohmann::json& messages, const ChatTemplate& tmpl,
                        const ToolRequest* tools = nullptr);

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
    ToolCallStream calls;  // with tools: content and call deltas parsed as the text grows
  };
  std::vector<Choice> choices_;
  int prompt_tokens_ = 0, completion_tokens_ = 0, cached_tokens_ = 0;
  std::vector<bool> prompt_counted_;
};

}  // namespace llmrun
