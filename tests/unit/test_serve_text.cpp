// Stop strings across tokens, UTF-8 hold-back, chat templates and request validation.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "serve/openai_api.h"
#include "serve/text_stream.h"
#include "temp_dir.h"
#include "util/error.h"

using namespace llmrun;
using llmrun::testing::TempDir;

namespace {
std::string feed(TextStream& ts, const std::string& bytes, bool& stopped) {
  std::string out;
  for (unsigned char c : bytes) {
    out += ts.push(c, stopped);
    if (stopped) break;
  }
  return out;
}
}  // namespace

TEST(TextStream, StopStringSpanningTokensIsNotEmitted) {
  ByteLevelTokenizer tok;
  TextStream ts(tok, {"END", "xyz"});
  bool stopped = false;
  std::string out;
  // "EN" is held back (could become "END") until "D" completes it.
  out += ts.push('a', stopped);
  out += ts.push('E', stopped);
  EXPECT_EQ(out, "a");
  out += ts.push('N', stopped);
  EXPECT_EQ(out, "a");
  out += ts.push('D', stopped);
  EXPECT_TRUE(stopped);
  EXPECT_EQ(out, "a");
}

TEST(TextStream, HeldPrefixIsReleasedWhenItDiverges) {
  ByteLevelTokenizer tok;
  TextStream ts(tok, {"END"});
  bool stopped = false;
  EXPECT_EQ(feed(ts, "xENx", stopped), "xENx");
  EXPECT_FALSE(stopped);
  EXPECT_EQ(feed(ts, "EN", stopped), "");
  EXPECT_EQ(ts.flush(), "EN");
}

TEST(TextStream, IncompleteUtf8IsHeldUntilComplete) {
  ByteLevelTokenizer tok;
  TextStream ts(tok, {});
  bool stopped = false;
  const std::string e_acute = "\xC3\xA9";
  EXPECT_EQ(ts.push(static_cast<unsigned char>(e_acute[0]), stopped), "");
  EXPECT_EQ(ts.push(static_cast<unsigned char>(e_acute[1]), stopped), e_acute);
}

TEST(ChatTemplate, RecognisesTemplatesFromTokenizerConfig) {
  TempDir dir;
  auto write = [&](const std::string& json) {
    std::ofstream(dir.path() / "tokenizer_config.json") << json;
  };
  EXPECT_EQ(ChatTemplate::for_model_dir(dir.path()).kind(), ChatTemplateKind::plain);  // no file
  write(R"({"chat_template": "{% for m in messages %}<|im_start|>{{m.role}}{% endfor %}"})");
  EXPECT_EQ(ChatTemplate::for_model_dir(dir.path()).kind(), ChatTemplateKind::chatml);
  write(R"({"chat_template": [{"name": "default", "template": "<|start_header_id|>"}]})");
  EXPECT_EQ(ChatTemplate::for_model_dir(dir.path()).kind(), ChatTemplateKind::llama3);
  const std::vector<ChatMessage> msgs{{"system", "S"}, {"user", "U"}};
  EXPECT_EQ(
      ChatTemplate(ChatTemplateKind::chatml).render(msgs),
      "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(ChatTemplate(ChatTemplateKind::llama3).render(msgs),
            "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nS<|eot_id|><|start_"
            "header_id|>user"
            "<|end_header_id|>\n\nU<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(ChatTemplate().render(msgs), "system: S\nuser: U\nassistant:");
}

TEST(ChatTemplate, InstTemplatesOfLlama2AndMistral) {
  TempDir dir;
  auto write = [&](const std::string& json) {
    std::ofstream(dir.path() / "tokenizer_config.json") << json;
  };
  write(
      R"({"chat_template": "{{ bos_token + '[INST] ' + '<<SYS>>' }}", "bos_token": {"content": "<B>"}, "eos_token": "<E>"})");
  const ChatTemplate llama2 = ChatTemplate::for_model_dir(dir.path());
  EXPECT_EQ(llama2.kind(), ChatTemplateKind::llama2);
  EXPECT_EQ(llama2.render({{"system", "S"}, {"user", " U1 "}, {"assistant", "A1"}, {"user", "U2"}}),
            // strip() applies to the system block + content, so U1's leading space stays
            "<B>[INST] <<SYS>>\nS\n<</SYS>>\n\n U1 [/INST] A1 <E><B>[INST] U2 [/INST]");
  EXPECT_EQ(llama2.render({{"user", "U"}}), "<B>[INST] U [/INST]");
  write(R"({"chat_template": "{{ bos_token }}{% for m in messages %}[INST] {% endfor %}"})");
  const ChatTemplate mistral = ChatTemplate::for_model_dir(dir.path());
  EXPECT_EQ(mistral.kind(), ChatTemplateKind::mistral);
  EXPECT_EQ(mistral.render({{"user", "U1"}, {"assistant", "A1"}, {"user", "U2"}}),
            "<s>[INST] U1 [/INST]A1</s>[INST] U2 [/INST]");
  EXPECT_THROW(mistral.render({{"system", "S"}, {"user", "U"}}), UserError);
  EXPECT_THROW(mistral.render({{"user", "U"}, {"user", "U"}}), UserError);
  EXPECT_THROW(llama2.render({{"assistant", "A"}}), UserError);
}

TEST(ChatTemplate, Phi3AndZephyr) {
  TempDir dir;
  auto write = [&](const std::string& json) {
    std::ofstream(dir.path() / "tokenizer_config.json") << json;
  };
  const std::vector<ChatMessage> msgs{{"system", "S"}, {"user", "U"}, {"tool", "T"}};
  write(
      R"({"chat_template": "{% for m in messages %}{{'<|user|>\n' + m['content'] + '<|end|>\n'}}{% endfor %}"})");
  const ChatTemplate phi3 = ChatTemplate::for_model_dir(dir.path());
  EXPECT_EQ(phi3.kind(), ChatTemplateKind::phi3);
  EXPECT_EQ(phi3.render(msgs), "<|system|>\nS<|end|>\n<|user|>\nU<|end|>\n<|assistant|>\n");
  EXPECT_EQ(phi3.end_of_turn(), "<|end|>");
  write(
      R"({"chat_template": "{{ bos_token }}{% for m in messages %}{{ '<|user|>\n' + m['content'] + eos_token }}{% endfor %}",
            "eos_token": "</s>", "bos_token": "<s>"})");
  const ChatTemplate zephyr = ChatTemplate::for_model_dir(dir.path());
  EXPECT_EQ(zephyr.kind(), ChatTemplateKind::zephyr);
  EXPECT_EQ(zephyr.render(msgs), "<s><|system|>\nS</s>\n<|user|>\nU</s>\n<|assistant|>\n");
}

TEST(OpenAiRequest, ParsesParametersAndRejectsBadOnes) {
  ByteLevelTokenizer tok;
  ChatTemplate tmpl;
  ApiContext ctx{tok, tmpl, "m", 64, 256};
  using nlohmann::json;
  CompletionJob job = parse_completion_request(
      json::parse(
          R"({"model":"m","prompt":["ab",[1,2,3]],"n":2,"seed":9,"stop":"x","logit_bias":{"5":-100},
                      "logprobs":3,"top_k":-1,"min_p":0.1,"max_tokens":10,"stream":true,
                      "stream_options":{"include_usage":true}})"),
      false, ctx);
  EXPECT_EQ(job.sequences(), 4);
  EXPECT_EQ(job.prompts[1], (std::vector<int32_t>{1, 2, 3}));
  EXPECT_TRUE(job.params.seeded);
  EXPECT_EQ(job.params.sampling.seed, 9u);
  EXPECT_EQ(job.params.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(job.params.logit_bias.at(5), -100.0f);
  EXPECT_EQ(job.params.logprobs, 3);
  EXPECT_EQ(job.params.sampling.top_k, 0);
  EXPECT_TRUE(job.include_usage);
  // Chat defaults max_tokens to the rest of the context.
  CompletionJob chat = parse_completion_request(
      json::parse(R"({"messages":[{"role":"user","content":"hi"}]})"), true, ctx);
  EXPECT_EQ(chat.params.max_tokens, 64 - static_cast<int>(chat.prompts[0].size()));

  for (const char* bad :
       {R"({"model":1,"prompt":"a"})", R"({"prompt":"a","temperature":-1})",
        R"({"prompt":"a","top_p":0})", R"({"prompt":[300]})", R"({"prompt":""})",
        R"({"prompt":"a","max_tokens":64})", R"({"prompt":"a","n":0})",
        R"({"prompt":"a","logit_bias":{"x":1}})", R"({"prompt":"a","stop":[1]})",
        R"({"prompt":"a","stream_options":{"include_usage":true}})", R"([1,2])"}) {
    try {
      parse_completion_request(json::parse(bad), false, ctx);
      ADD_FAILURE() << "accepted " << bad;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status, 400) << bad;
    }
  }
  // An unknown model (no such base or LoRA adapter) is OpenAI's 404.
  try {
    parse_completion_request(json::parse(R"({"model":"other","prompt":"a"})"), false, ctx);
    ADD_FAILURE() << "accepted model 'other'";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status, 404);
    EXPECT_EQ(e.param, "model");
  }
}
