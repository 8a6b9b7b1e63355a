#pragma once
// Tokenizers in GGUF metadata. Written: llama.cpp's tokenizer.ggml.* keys (model "gpt2" for
// byte-level BPE, "llama" for SentencePiece-style BPE with byte fallback: tokens, token
// types, merges or scores, bos/eos ids, add_bos_token), the chat template
// (tokenizer.chat_template) and, as the GGUF spec allows, the exact tokenizer.json text in
// tokenizer.huggingface.json. Read: that text when present, else a tokenizer.json rebuilt
// from tokenizer.ggml.* (the files llama.cpp's own converter writes).
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "ckpt/gguf_file.h"
#include "data/tokenizer.h"

namespace llmrun {

// `tokenizer_config`: the model dir's tokenizer_config.json (chat_template, bos/eos names), or
// null. `model_vocab`: the embedding's rows; a shorter token list is padded to it with unused
// [PAD<id>] tokens (llama.cpp requires one token per row).
void write_gguf_tokenizer(GgufWriter& w, const Tokenizer& tok,
                          const nlohmann::json& tokenizer_config, int32_t model_vocab);

// prefer_hf_json = false ignores tokenizer.huggingface.json (tests of the ggml path).
std::unique_ptr<Tokenizer> read_gguf_tokenizer(const GgufReader& r, bool prefer_hf_json = true);

// tokenizer_config.json's equivalent from the metadata: chat_template, bos_token, eos_token
// (texts), for the chat templates and `serve`.
nlohmann::json gguf_tokenizer_config(const GgufReader& r);

}  // namespace llmrun
