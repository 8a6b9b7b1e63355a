// Parsing and validating OpenAI completion and chat-completion request bodies.
#include <cmath>
#include <limits>

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

namespace {

double number(const json& body, const char* key, double fallback, double lo, double hi) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  const json& v = body[key];
  if (!v.is_number()) throw invalid(std::string("'") + key + "' must be a number", key);
  const double x = v.get<double>();
  if (!(x >= lo && x <= hi))
    throw invalid(std::string("'") + key + "' must be in [" + json(lo).dump() + ", " + json(hi).dump() + "], got " +
                      v.dump(),
                  key);
  return x;
}

int64_t integer(const json& body, const char* key, int64_t fallback, int64_t lo, int64_t hi) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  const json& v = body[key];
  if (!v.is_number_integer()) throw invalid(std::string("'") + key + "' must be an integer", key);
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    throw invalid(std::string("'") + key + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "], got " + std::to_string(x),
                  key);
  return x;
}

bool boolean(const json& body, const char* key, bool fallback) {
  if (!body.contains(key) || body[key].is_null()) return fallback;
  if (!body[key].is_boolean()) throw invalid(std::string("'") + key + "' must be a boolean", key);
  return body[key].get<bool>();
}

std::vector<int32_t> token_array(const json& a, int vocab, const char* param) {
  std::vector<int32_t> out;
  for (const auto& t : a) {
    if (!t.is_number_integer() || t.get<int64_t>() < 0 || t.get<int64_t>() >= vocab)
      throw invalid(std::string("'") + param + "' holds " + t.dump() + ", not a token id below " + std::to_string(vocab),
                    param);
    out.push_back(static_cast<int32_t>(t.get<int64_t>()));
  }
  return out;
}

std::vector<std::vector<int32_t>> completion_prompts(const json& p, const ApiContext& ctx) {
  std::vector<std::vector<int32_t>> out;
  if (p.is_string()) {
    out.push_back(ctx.tok.encode_prompt(p.get<std::string>()));
  } else if (p.is_array() && !p.empty() && p[0].is_number()) {
    out.push_back(token_array(p, ctx.vocab, "prompt"));
  } else if (p.is_array() && !p.empty()) {
    for (const auto& e : p) {
      if (e.is_string())
        out.push_back(ctx.tok.encode_prompt(e.get<std::string>()));
      else if (e.is_array())
        out.push_back(token_array(e, ctx.vocab, "prompt"));
      else
        throw invalid("'prompt' must be a string, an array of strings, or token arrays", "prompt");
    }
  } else {
    throw invalid("'prompt' must be a non-empty string, array of strings, or token array", "prompt");
  }
  for (const auto& t : out)
    if (t.empty()) throw invalid("'prompt' encodes to no tokens", "prompt");
  return out;
}

}  // namespace

std::string render_chat(const json& messages, const ChatTemplate& tmpl) {
  if (!messages.is_array() || messages.empty()) throw invalid("'messages' must be a non-empty array", "messages");
  std::vector<ChatMessage> msgs;
  for (const auto& m : messages) {
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string())
      throw invalid("each message needs a string 'role'", "messages");
    ChatMessage cm{m["role"].get<std::string>(), ""};
    if (cm.role != "system" && cm.role != "user" && cm.role != "assistant" && cm.role != "developer" &&
        cm.role != "tool")
      throw invalid("unknown message role '" + cm.role + "'", "messages");
    const json c = m.value("content", json());
    if (c.is_string()) {
      cm.content = c.get<std::string>();
    } else if (c.is_array()) {  // content parts: only text is understood
      for (const auto& part : c) {
        if (!part.is_object() || part.value("type", "") != "text" || !part.contains("text") || !part["text"].is_string())
          throw invalid("only text content parts are supported", "messages");
        cm.content += part["text"].get<std::string>();
      }
    } else if (!c.is_null()) {
      throw invalid("message 'content' must be a string or an array of text parts", "messages");
    }
    msgs.push_back(std::move(cm));
  }
  return tmpl.render(msgs);
}

CompletionJob parse_completion_request(const json& body, bool chat, const ApiContext& ctx) {
  if (!body.is_object()) throw invalid("the request body must be a JSON object");
  CompletionJob job;
  job.chat = chat;
  if (body.contains("model") && !body["model"].is_null()) {
    if (!body["model"].is_string() || body["model"].get<std::string>() != ctx.model_name)
      throw invalid("the model '" + (body["model"].is_string() ? body["model"].get<std::string>() : body["model"].dump()) +
                        "' does not exist; this server serves '" + ctx.model_name + "'",
                    "model");
  }
  if (chat) {
    if (!body.contains("messages")) throw invalid("'messages' is required", "messages");
    job.prompts.push_back(ctx.tok.encode_prompt(render_chat(body["messages"], ctx.chat_template)));
    if (job.prompts[0].empty()) throw invalid("the rendered chat encodes to no tokens", "messages");
  } else {
    if (!body.contains("prompt")) throw invalid("'prompt' is required", "prompt");
    job.prompts = completion_prompts(body["prompt"], ctx);
    if (boolean(body, "echo", false)) throw invalid("'echo' is not supported by this server", "echo");
    if (body.contains("suffix") && !body["suffix"].is_null()) throw invalid("'suffix' is not supported", "suffix");
  }
  job.n = static_cast<int>(integer(body, "n", 1, 1, 128));
  if (body.contains("best_of") && !body["best_of"].is_null() && integer(body, "best_of", 1, 1, 128) != job.n)
    throw invalid("'best_of' different from 'n' is not supported", "best_of");
  job.stream = boolean(body, "stream", false);
  if (body.contains("stream_options") && !body["stream_options"].is_null()) {
    const json& so = body["stream_options"];
    if (!so.is_object()) throw invalid("'stream_options' must be an object", "stream_options");
    if (!job.stream) throw invalid("'stream_options' is only allowed with stream: true", "stream_options");
    job.include_usage = boolean(so, "include_usage", false);
  }

  GenerationParams& p = job.params;
  p.sampling.temperature = static_cast<float>(number(body, "temperature", 1.0, 0.0, 2.0));
  p.sampling.top_p = static_cast<float>(number(body, "top_p", 1.0, 1e-9, 1.0));
  const int64_t top_k = integer(body, "top_k", 0, -1, std::numeric_limits<int32_t>::max());
  p.sampling.top_k = top_k < 0 ? 0 : static_cast<int>(top_k);
  p.sampling.min_p = static_cast<float>(number(body, "min_p", 0.0, 0.0, 1.0));
  if (body.contains("seed") && !body["seed"].is_null()) {
    p.sampling.seed = static_cast<uint64_t>(integer(body, "seed", 0, std::numeric_limits<int64_t>::min(),
                                                    std::numeric_limits<int64_t>::max()));
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
      for (const auto& e : s) {
        if (!e.is_string()) throw invalid("'stop' must be a string or an array of strings", "stop");
        p.stop.push_back(e.get<std::string>());
      }
    } else {
      throw invalid("'stop' must be a string or an array of strings", "stop");
    }
  }
  if (chat && !ctx.chat_template.end_of_turn().empty()) p.stop.push_back(ctx.chat_template.end_of_turn());
  if (body.contains("stop_token_ids") && !body["stop_token_ids"].is_null())
    p.stop_token_ids = token_array(body["stop_token_ids"], ctx.vocab, "stop_token_ids");
  if (body.contains("logit_bias") && !body["logit_bias"].is_null()) {
    const json& lb = body["logit_bias"];
    if (!lb.is_object()) throw invalid("'logit_bias' must be an object of token id -> bias", "logit_bias");
    for (const auto& [k, v] : lb.items()) {
      int64_t id = -1;
      try {
        size_t used = 0;
        id = std::stoll(k, &used);
        if (used != k.size()) id = -1;
      } catch (const std::exception&) {
        id = -1;
      }
      if (id < 0 || id >= ctx.vocab) throw invalid("'logit_bias' key '" + k + "' is not a token id", "logit_bias");
      if (!v.is_number() || v.get<double>() < -100 || v.get<double>() > 100)
        throw invalid("'logit_bias' values must be numbers in [-100, 100]", "logit_bias");
      p.logit_bias[static_cast<int32_t>(id)] = v.get<float>();
    }
  }
  if (chat) {
    job.logprobs = boolean(body, "logprobs", false);
    job.top_logprobs = static_cast<int>(integer(body, "top_logprobs", 0, 0, 20));
    if (job.top_logprobs > 0 && !job.logprobs) throw invalid("'top_logprobs' needs 'logprobs': true", "top_logprobs");
  } else if (body.contains("logprobs") && !body["logprobs"].is_null()) {
    job.logprobs = true;
    job.top_logprobs = static_cast<int>(integer(body, "logprobs", 0, 0, 20));
  }
  p.logprobs = job.logprobs ? job.top_logprobs : -1;

  int longest = 0;
  for (const auto& t : job.prompts) longest = std::max(longest, static_cast<int>(t.size()));
  if (longest >= ctx.max_model_len)
    throw invalid("the prompt has " + std::to_string(longest) + " tokens; this model's context is " +
                      std::to_string(ctx.max_model_len) + " (prompt plus at least one generated token)",
                  chat ? "messages" : "prompt");
  const char* max_key = chat && body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  const int64_t room = ctx.max_model_len - longest;
  const int64_t max_tokens = integer(body, max_key, chat ? room : 16, 1, std::numeric_limits<int32_t>::max());
  if (max_tokens > room)
    throw invalid("'" + std::string(max_key) + "' is " + std::to_string(max_tokens) + " but the prompt of " +
                      std::to_string(longest) + " tokens leaves room for " + std::to_string(room) +
                      " in this model's context of " + std::to_string(ctx.max_model_len),
                  max_key);
  p.max_tokens = static_cast<int>(max_tokens);
  return job;
}

}  // namespace llmrun
