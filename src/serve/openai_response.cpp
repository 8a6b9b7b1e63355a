// Building OpenAI response objects and stream chunks from engine events.
#include <chrono>
#include <random>

#include "serve/openai_api.h"

namespace llmrun {

using nlohmann::json;

namespace {
std::string random_id(const char* prefix) {
  static thread_local std::mt19937_64 rng{std::random_device{}()};
  static const char* hex = "0123456789abcdef";
  std::string id = prefix;
  for (int i = 0; i < 24; ++i) id += hex[rng() % 16];
  return id;
}
json bytes_of(const std::string& s) {
  json b = json::array();
  for (unsigned char c : s) b.push_back(int(c));
  return b;
}
}  // namespace

ResponseBuilder::ResponseBuilder(const CompletionJob& job, const ApiContext& ctx)
    : job_(job),
      ctx_(ctx),
      id_(random_id(job.chat ? "chatcmpl-" : "cmpl-")),
      created_(std::chrono::duration_cast<std::chrono::seconds>(
                   std::chrono::system_clock::now().time_since_epoch())
                   .count()),
      choices_(static_cast<size_t>(job.sequences())),
      prompt_counted_(job.prompts.size(), false) {
  for (Choice& c : choices_) c.calls = ToolCallStream(ctx.chat_template.kind());
}

json ResponseBuilder::base(const char* object) const {
  return {{"id", id_},
          {"object", object},
          {"created", created_},
          {"model", job_.params.lora ? job_.model : ctx_.model_name}};
}

namespace {
json tool_calls_json(const std::vector<ToolCall>& calls, bool with_index) {
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json c = {{"id", calls[k].id},
              {"type", "function"},
              {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}};
    if (with_index) c["index"] = k;
    out.push_back(std::move(c));
  }
  return out;
}
// One streamed call delta as OpenAI sends it: the first with index, id, type, name and empty
// arguments; later ones with index and an arguments fragment.
json tool_call_delta_json(const ToolCallDelta& d) {
  if (d.id.empty()) return {{"index", d.index}, {"function", {{"arguments", d.arguments}}}};
  return {{"index", d.index},
          {"id", d.id},
          {"type", "function"},
          {"function", {{"name", d.name}, {"arguments", d.arguments}}}};
}
}  // namespace

json ResponseBuilder::usage() const {
  return {{"prompt_tokens", prompt_tokens_},
          {"completion_tokens", completion_tokens_},
          {"total_tokens", prompt_tokens_ + completion_tokens_},
          {"prompt_tokens_details", {{"cached_tokens", cached_tokens_}}}};
}

json ResponseBuilder::logprobs_json(const std::vector<TokenLogprob>& lps,
                                    size_t text_offset) const {
  if (job_.chat) {
    json content = json::array();
    for (const auto& lp : lps) {
      const std::string t = ctx_.tok.token_bytes(lp.token);
      json top = json::array();
      for (const auto& alt : lp.top) {
        const std::string a = ctx_.tok.token_bytes(alt.token);
        top.push_back({{"token", a}, {"logprob", alt.logprob}, {"bytes", bytes_of(a)}});
      }
      content.push_back(
          {{"token", t}, {"logprob", lp.logprob}, {"bytes", bytes_of(t)}, {"top_logprobs", top}});
    }
    return {{"content", content}};
  }
  json tokens = json::array(), token_lps = json::array(), tops = json::array(),
       offsets = json::array();
  size_t offset = text_offset;
  for (const auto& lp : lps) {
    const std::string t = ctx_.tok.token_bytes(lp.token);
    tokens.push_back(t);
    token_lps.push_back(lp.logprob);
    json top = json::object();
    for (const auto& alt : lp.top) top[ctx_.tok.token_bytes(alt.token)] = alt.logprob;
    tops.push_back(top);
    offsets.push_back(offset);
    offset += t.size();
  }
  return {{"tokens", tokens},
          {"token_logprobs", token_lps},
          {"top_logprobs", tops},
          {"text_offset", offsets}};
}

void ResponseBuilder::add(int index, const SequenceEvent& ev) {
  Choice& c = choices_[index];
  c.text += ev.text;
  c.logprobs.insert(c.logprobs.end(), ev.tokens.begin(), ev.tokens.end());
  if (ev.finished) {
    c.finish_reason = ev.finish_reason;
    completion_tokens_ += ev.completion_tokens;
    const size_t prompt = static_cast<size_t>(index / job_.n);
    if (!prompt_counted_[prompt]) {
      prompt_counted_[prompt] = true;
      prompt_tokens_ += ev.prompt_tokens;
      cached_tokens_ += ev.cached_tokens;
    }
  }
}

std::vector<json> ResponseBuilder::stream_chunks(int index, const SequenceEvent& ev) {
  Choice& c = choices_[index];
  const size_t offset = c.text.size();
  add(index, ev);
  std::vector<json> out;
  const json reason = ev.finished ? json(ev.finish_reason) : json(nullptr);
  const json lps =
      job_.logprobs && !ev.tokens.empty() ? logprobs_json(ev.tokens, offset) : json(nullptr);
  if (job_.chat) {
    if (!c.role_sent) {
      c.role_sent = true;
      json first = base("chat.completion.chunk");
      first["choices"] = json::array({{{"index", index},
                                       {"delta", {{"role", "assistant"}, {"content", ""}}},
                                       {"logprobs", nullptr},
                                       {"finish_reason", nullptr}}});
      out.push_back(std::move(first));
    }
    std::vector<ToolCallDelta> deltas;
    const std::string text =
        job_.tools.active() ? c.calls.feed(c.text, ev.finished, deltas) : ev.text;
    const bool called = c.calls.calls() > 0;
    if (text.empty() && deltas.empty() && !ev.finished && lps.is_null()) return out;
    auto chunk_with = [&](json delta, const json& logprobs, const json& finish) {
      json chunk = base("chat.completion.chunk");
      chunk["choices"] = json::array({{{"index", index},
                                       {"delta", std::move(delta)},
                                       {"logprobs", logprobs},
                                       {"finish_reason", finish}}});
      out.push_back(std::move(chunk));
    };
    const json finish = ev.finished && called ? json("tool_calls") : reason;
    const json content = text.empty() ? json::object() : json{{"content", text}};
    if (deltas.empty()) {
      chunk_with(content, lps, finish);
    } else {  // content first, then each call delta in its own chunk, then the finish
      if (!text.empty()) chunk_with(content, lps, nullptr);
      for (const ToolCallDelta& d : deltas)
        chunk_with({{"tool_calls", json::array({tool_call_delta_json(d)})}}, nullptr, nullptr);
      if (ev.finished) chunk_with(json::object(), text.empty() ? lps : json(nullptr), finish);
    }
  } else {
    if (ev.text.empty() && !ev.finished && lps.is_null()) return out;
    json chunk = base("text_completion");
    chunk["choices"] = json::array(
        {{{"index", index}, {"text", ev.text}, {"logprobs", lps}, {"finish_reason", reason}}});
    out.push_back(std::move(chunk));
  }
  return out;
}

json ResponseBuilder::usage_chunk() const {
  json chunk = base(job_.chat ? "chat.completion.chunk" : "text_completion");
  chunk["choices"] = json::array();
  chunk["usage"] = usage();
  return chunk;
}

json ResponseBuilder::final_response() const {
  json r = base(job_.chat ? "chat.completion" : "text_completion");
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    const json lps = job_.logprobs ? logprobs_json(c.logprobs, 0) : json(nullptr);
    if (job_.chat && job_.tools.active()) {
      std::string content;
      const auto calls = extract_tool_calls(c.text, ctx_.chat_template.kind(), content);
      json message = {{"role", "assistant"},
                      {"content", calls.empty() || !content.empty() ? json(content) : json()}};
      if (!calls.empty()) message["tool_calls"] = tool_calls_json(calls, false);
      choices.push_back({{"index", i},
                         {"message", message},
                         {"logprobs", lps},
                         {"finish_reason", calls.empty() ? c.finish_reason : "tool_calls"}});
    } else if (job_.chat)
      choices.push_back({{"index", i},
                         {"message", {{"role", "assistant"}, {"content", c.text}}},
                         {"logprobs", lps},
                         {"finish_reason", c.finish_reason}});
    else
      choices.push_back(
          {{"index", i}, {"text", c.text}, {"logprobs", lps}, {"finish_reason", c.finish_reason}});
  }
  r["choices"] = choices;
  r["usage"] = usage();
  return r;
}

}  // namespace llmrun
