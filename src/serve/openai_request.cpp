// Parsing and validating OpenAI completion and chat-completion request bodies.
#include <cmath>
#include <limits>
#include <string_view>

#include "serve/openai_api.h"

namespace llmrun {

using nlohmann::json;

json error_body(const ApiError& e) {
  json err = {{"message", e.what()}, {"type", e.type}, {"param", nullptr}, {"code", e.status}};
  if (!e.param.empty()) err["param"] = e.param;
  return {{"error", err}};
}

ApiError invalid(const std::string& message, const std::string& param) {
  return ApiError(400, "invalid_request_error", message, param);
}

std::string echo(const json& v) {
  constexpr size_t kMax = 80;
  std::string s = v.dump(-1, ' ', false, json::error_handler_t::replace);
  if (s.size() > kMax) s = s.substr(0, kMax) + "...";
  return s;
}

json parse_body(const std::string& text) {
  // One pass over the bytes: brackets outside strings give the depth; the last string read at
  // depth 1 and followed by ':' is the top-level key the deep value belongs to.
  int depth = 0;
  bool in_string = false, escaped = false;
  size_t str_begin = 0;
  std::string_view last_string, key;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (c == '\\')
        escaped = true;
      else if (c == '"') {
        in_string = false;
        if (depth == 1) last_string = std::string_view(text).substr(str_begin, i - str_begin);
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
      str_begin = i + 1;
    } else if (c == ':' && depth == 1) {
      key = last_string;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) {
        const std::string field(key.substr(0, 64));
        throw invalid((field.empty() ? std::string("the body") : "'" + field + "'") +
                          " nests JSON deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                      field);
      }
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  try {
    return json::parse(text);
  } catch (const json::exception& e) {
    throw invalid(std::string("the body is not valid JSON: ") + e.what());
  }
}

namespace {

// Per-request bounds on what the engine checks for every generated token.
constexpr size_t kMaxStops = 16, kMaxStopBytes = 256, kMaxStopTokenIds = 1024;

double number(const json& body, const char* key, double fallback, double lo, double hi) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  const json& v = body[key];
  if (!v.is_number()) throw invalid(std::string("'") + key + "' must be a number", key);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    throw invalid(std::string("'") + key + "' must be in [" + json(lo).dump() + ", " +
                      json(hi).dump() + "], got " + v.dump(),
                  key);
  return x;
}

int64_t integer(const json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  const json& v = body[key];
  if (!v.is_number_integer()) throw invalid(std::string("'") + key + "' must be an integer", key);
  // Unsigned values past int64 would wrap negative: out of range, reported as sent.
  const bool huge =
      v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max());
  const int64_t x = huge ? 0 : v.get<int64_t>();
  if (huge || x < lo || x > hi)
    throw invalid(std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " +
                      std::to_string(hi) + "], got " + v.dump(),
                  key);
  return x;
}

bool boolean(const json& body, const char* key, bool fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_boolean()) throw invalid(std::string("'") + key + "' must be a boolean", key);
  return body[key].get<bool>();
}

}  // namespace

std::vector<int32_t> token_ids(const json& a, int vocab, const char* param) {
  // nlohmann iterates a scalar as a one-element range: insist on an array first.
  if (!a.is_array())
    throw invalid(std::string("'") + param + "' must be an array of token ids", param);
  std::vector<int32_t> out;
  for (const auto& t : a) {
    // Unsigned ids are compared as such: a huge one must not wrap into range.
    const bool ok = t.is_number_unsigned() ? t.get<uint64_t>() < uint64_t(vocab)
                                           : t.is_number_integer() && t.get<int64_t>() >= 0 &&
                                                 t.get<int64_t>() < vocab;
    if (!ok)
      throw invalid(std::string("'") + param + "' holds " + echo(t) + ", not a token id below " +
                        std::to_string(vocab),
                    param);
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return out;
}

namespace {

std::vector<std::vector<int32_t>> completion_prompts(const json& p, const ApiContext& ctx) {
  std::vector<std::vector<int32_t>> out;
  if (p.is_string()) {
    out.push_back(ctx.tok.encode_prompt(p.get<std::string>()));
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    out.push_back(token_ids(p, ctx.vocab, "prompt"));
  } else if (p.is_array() && !p.empty()) {
    for (const auto& e : p) {
      if (e.is_string())
        out.push_back(ctx.tok.encode_prompt(e.get<std::string>()));
      else if (e.is_array())
        out.push_back(token_ids(e, ctx.vocab, "prompt"));
      else
        throw invalid("'prompt' must be a string, an array of strings, or token arrays", "prompt");
    }
  } else {
    throw invalid("'prompt' must be a non-empty string, array of strings, or token array",
                  "prompt");
  }
  for (const auto& t : out)
    if (t.empty()) throw invalid("'prompt' encodes to no tokens", "prompt");
  return out;
}

}  // namespace

std::string render_chat(const json& messages, const ChatTemplate& tmpl, const ToolRequest* tools) {
  if (!messages.is_array() || messages.empty())
    throw invalid("'messages' must be a non-empty array", "messages");
  std::vector<ChatMessage> msgs;
  for (size_t i = 0; i < messages.size(); ++i) {
    const json& m = messages[i];
    const std::string at = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) throw invalid("'" + at + "' must be an object, got " + echo(m), "messages");
    if (!m.contains("role") || !m["role"].is_string())
      throw invalid("'" + at + ".role' must be a string", "messages");
    ChatMessage cm{m["role"].get<std::string>(), ""};
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" &&
        cm.role != "developer" && cm.role != "tool")
      throw invalid("unknown message role '" + cm.role.substr(0, 64) + "' in '" + at + ".role'",
                    "messages");
    const json* c = m.contains("content") ? &m["content"] : nullptr;
    if (c == nullptr || c->is_null()) {
      // No text: an assistant turn that only called tools, say.
    } else if (c->is_string()) {
      cm.content = c->get<std::string>();
    } else if (c->is_array()) {  // content parts: only text is understood
      for (size_t k = 0; k < c->size(); ++k) {
        const json& part = (*c)[k];
        const std::string pat = at + ".content[" + std::to_string(k) + "]";
        if (!part.is_object())
          throw invalid("'" + pat + "' must be an object, got " + echo(part), "messages");
        if (!part.contains("type") || !part["type"].is_string())
          throw invalid("'" + pat + ".type' must be a string", "messages");
        if (part["type"].get<std::string>() != "text")
          throw invalid("'" + pat + ".type' is " + echo(part["type"]) +
                            ": only text content parts are supported",
                        "messages");
        if (!part.contains("text") || !part["text"].is_string())
          throw invalid("'" + pat + ".text' must be a string", "messages");
        cm.content += part["text"].get<std::string>();
      }
    } else {
      throw invalid(
          "'" + at + ".content' must be a string or an array of text parts, got " + echo(*c),
          "messages");
    }
    msgs.push_back(std::move(cm));
  }
  return render_with_tools(messages, std::move(msgs), tools ? *tools : ToolRequest{}, tmpl);
}

CompletionJob parse_completion_request(const json& body, bool chat, const ApiContext& ctx) {
  if (!body.is_object()) throw invalid("the request body must be a JSON object");
  CompletionJob job;
  job.chat = chat;
  if (body.contains("model") && !body["model"].is_null()) {
    const json& model = body["model"];
    if (!model.is_string()) throw invalid("'model' must be a string, got " + echo(model), "model");
    job.model = model.get<std::string>();
    if (job.model != ctx.model_name && ctx.loras) job.params.lora = ctx.loras->find(job.model);
    if (job.model != ctx.model_name && !job.params.lora) {
      std::string served = "'" + ctx.model_name + "'";
      if (ctx.loras)
        for (const auto& l : ctx.loras->list()) served += ", LoRA adapter '" + l->name() + "'";
      throw ApiError(404, "not_found_error",
                     "the model " + echo(model) + " does not exist; this server serves " + served,
                     "model");
    }
  }
  if (chat) {
    if (!body.contains("messages")) throw invalid("'messages' is required", "messages");
    job.tools = parse_tools(body);
    job.prompts.push_back(
        ctx.tok.encode_prompt(render_chat(body["messages"], ctx.chat_template, &job.tools)));
    if (job.prompts[0].empty()) throw invalid("the rendered chat encodes to no tokens", "messages");
  } else {
    if (!body.contains("prompt")) throw invalid("'prompt' is required", "prompt");
    job.prompts = completion_prompts(body["prompt"], ctx);
    if (boolean(body, "echo", false))
      throw invalid("'echo' is not supported by this server", "echo");
    if (body.contains("suffix") && !body["suffix"].is_null())
      throw invalid("'suffix' is not supported", "suffix");
  }
  job.n = static_cast<int>(integer(body, "n", 1, 1, 128));
  if (body.contains("best_of") && !body["best_of"].is_null() &&
      integer(body, "best_of", 1, 1, 128) != job.n)
    throw invalid("'best_of' different from 'n' is not supported", "best_of");
  job.stream = boolean(body, "stream", false);
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& so = body["stream_options"];
    if (!so.is_object()) throw invalid("'stream_options' must be an object", "stream_options");
    if (!job.stream)
      throw invalid("'stream_options' is only allowed with stream: true", "stream_options");
    job.include_usage = boolean(so, "include_usage", false);
  }

  GenerationParams& p = job.params;
  p.sampling.temperature = static_cast<float>(number(body, "temperature", 1.0, 0.0, 2.0));
  p.sampling.top_p = static_cast<float>(number(body, "top_p", 1.0, 1e-9, 1.0));
  const int64_t top_k = integer(body, "top_k", 0, -1, std::numeric_limits<int32_t>::max());
  p.sampling.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  p.sampling.min_p = static_cast<float>(number(body, "min_p", 0.0, 0.0, 1.0));
  if (body.contains("seed") && !body["seed"].is_null()) {
    p.sampling.seed = static_cast<uint64_t>(integer(
        body, "seed", 0, std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max()));
    p.seeded = true;
  }
  p.presence_penalty = static_cast<float>(number(body, "presence_penalty", 0.0, -2.0, 2.0));
  p.frequency_penalty = static_cast<float>(number(body, "frequency_penalty", 0.0, -2.0, 2.0));
  p.repetition_penalty = static_cast<float>(number(body, "repetition_penalty", 1.0, 1e-6, 10.0));
  p.ignore_eos = boolean(body, "ignore_eos", false);
  if (body.contains("stop") && !body["stop"].is_null()) {
    const json& s = body["stop"];
    if (s.is_string()) {
      p.stop.push_back(s.get<std::string>());
    } else if (s.is_array()) {
      // Every generated token is checked against every stop string on the engine thread: a
      // request must not be able to stall the whole batch with thousands of them.
      if (s.size() > kMaxStops)
        throw invalid("'stop' has " + std::to_string(s.size()) + " strings; at most " +
                          std::to_string(kMaxStops) + " are allowed",
                      "stop");
      for (const auto& e : s) {
        if (!e.is_string()) throw invalid("'stop' must be a string or an array of strings", "stop");
        p.stop.push_back(e.get<std::string>());
      }
    } else {
      throw invalid("'stop' must be a string or an array of strings", "stop");
    }
  }
  for (const auto& stop : p.stop)
    if (stop.size() > kMaxStopBytes)
      throw invalid("a 'stop' string has " + std::to_string(stop.size()) + " bytes; at most " +
                        std::to_string(kMaxStopBytes) + " are allowed",
                    "stop");
  if (chat && !ctx.chat_template.end_of_turn().empty())
    p.stop.push_back(ctx.chat_template.end_of_turn());
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null())
    p.stop_token_ids = token_ids(body["stop_token_ids"], ctx.vocab, "stop_token_ids");
  if (p.stop_token_ids.size() > kMaxStopTokenIds)
    throw invalid("'stop_token_ids' has " + std::to_string(p.stop_token_ids.size()) +
                      " ids; at most " + std::to_string(kMaxStopTokenIds) + " are allowed",
                  "stop_token_ids");
  if (body.contains("logit_bias") && !body["logit_bias"].is_null()) {
    const json& lb = body["logit_bias"];
    if (!lb.is_object())
      throw invalid("'logit_bias' must be an object of token id -> bias", "logit_bias");
    for (const auto& [k, v] : lb.items()) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(k, &used);
        if (used != k.size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      if (id < 0 || id >= ctx.vocab)
        throw invalid("'logit_bias' key '" + k.substr(0, 32) + "' is not a token id", "logit_bias");
      if (!v.is_number() || v.get<double>() < -100 || v.get<double>() > 100)
        throw invalid("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
      p.logit_bias[static_cast<int32_t>(id)] = v.get<float>();
    }
  }
  if (chat) {
    job.logprobs = boolean(body, "logprobs", false);
    job.top_logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 0, 20));
    if (job.top_logprobs > 0 && !job.logprobs)
      throw invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    job.logprobs = true;
    job.top_logprobs = static_cast<int>(integer(body, "logprobs", 0, 0, 20));
  }
  p.logprobs = job.logprobs ? job.top_logprobs : -1;

  int longest = 0;
  for (const auto& t : job.prompts) longest = std::max(longest, static_cast<int>(t.size()));
  if (longest >= ctx.max_model_len)
    throw invalid("the prompt has " + std::to_string(longest) +
                      " tokens; this model's context is " + std::to_string(ctx.max_model_len) +
                      " (prompt plus at least one generated token)",
                  chat ? "messages" : "prompt");
  const char* max_key =
      chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const int64_t room = ctx.max_model_len - longest;
  const int64_t max_tokens =
      integer(body, max_key, chat ? room : 16, 1, std::numeric_limits<int32_t>::max());
  if (max_tokens > room)
    throw invalid("'" + std::string(max_key) + "' is " + std::to_string(max_tokens) +
                      " but the prompt of " + std::to_string(longest) + " tokens leaves room for " +
                      std::to_string(room) + " in this model's context of " +
                      std::to_string(ctx.max_model_len),
                  max_key);
  p.max_tokens = static_cast<int>(max_tokens);
  p.constraint = parse_constraint(body, ctx, p.max_tokens, &job.tools);
  // A constrained reply ends where its grammar does, not at the template's end-of-turn text.
  if (p.constraint && chat && !ctx.chat_template.end_of_turn().empty()) p.stop.pop_back();
  return job;
}

}  // namespace llmrun
