// `llmrun data ...`: dataset tools (prepare, inspect, tokenize).
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "data/data_prepare.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"
#include "util/error.h"

namespace llmrun::cli {

namespace {

std::unique_ptr<Tokenizer> tokenizer_from_flag(const std::string& flag) {
  if (flag == "byte") return std::make_unique<ByteLevelTokenizer>();
  return load_tokenizer(flag);
}

// One JSON string per input line in, one {"ids": [...], "text": decode(ids)} object per line out:
// a scriptable view of exactly what training sees, used by the tokenizer oracle tests.
int tokenize(const std::string& tokenizer_flag) {
  const auto tok = tokenizer_from_flag(tokenizer_flag);
  std::string line;
  for (int64_t n = 1; std::getline(std::cin, line); ++n) {
    nlohmann::json text;
    try {
      text = nlohmann::json::parse(line);
    } catch (const nlohmann::json::parse_error& e) {
      throw UserError("stdin:" + std::to_string(n) + ": not a JSON string: " + e.what());
    }
    if (!text.is_string())
      throw UserError("stdin:" + std::to_string(n) + ": expected a JSON string");
    std::vector<int32_t> ids;
    try {
      ids = tok->encode(text.get<std::string>());
    } catch (const UserError& e) {
      throw UserError("stdin:" + std::to_string(n) + ": " + e.what());
    }
    const nlohmann::json out = {{"ids", ids}, {"text", tok->decode(ids)}};
    const std::string s = out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    std::fwrite(s.data(), 1, s.size(), stdout);
  }
  return 0;
}

int prepare(const PrepareOptions& opt) {
  const PrepareReport r = prepare_dataset(opt);
  if (r.skipped > 0)
    spdlog::warn("skipped {} bad documents (--skip-bad); the first: {}", r.skipped,
                 r.first_skipped);
  spdlog::info(
      "wrote {}.bin/.idx: {} documents, {} tokens from {} files ({:.1f} MB) in {:.1f} s: {:.1f} "
      "MB/s, {:.0f} tokens/s{}",
      opt.output, r.documents, r.tokens, r.files, r.bytes / 1e6, r.seconds,
      r.bytes / 1e6 / r.seconds, r.tokens / r.seconds,
      r.empty ? " (" + std::to_string(r.empty) + " empty documents left out)" : "");
  return 0;
}

// Counts, dtype, tokenizer and a decoded sample: enough to see that a dataset is what you meant.
int inspect(const std::string& prefix, const std::string& tokenizer_flag, int64_t sample_tokens) {
  if (!is_indexed_dataset(prefix))
    throw UserError(prefix + ": no " + prefix + ".idx and " + prefix +
                    ".bin here (give the path prefix, without extension)");
  IndexedDataset ds(prefix);
  std::printf("dataset:   %s (.bin, .idx: Megatron MMIDIDX)\n", prefix.c_str());
  std::printf("dtype:     %s\n", dtype_name(ds.dtype()));
  std::printf("documents: %lld\n", static_cast<long long>(ds.documents()));
  std::printf("tokens:    %lld\n", static_cast<long long>(ds.tokens()));
  std::printf("max id:    %lld\n", static_cast<long long>(ds.max_token()));
  std::unique_ptr<Tokenizer> tok;
  if (!tokenizer_flag.empty()) {
    tok = tokenizer_from_flag(tokenizer_flag);
    std::fflush(stdout);
    ds.check_tokens_below(tok->vocab_size(), "");
  } else if (std::filesystem::exists(prefix + ".json")) {
    const DatasetMeta m = ds.meta();
    std::printf("tokenizer: %s (vocab %lld, fingerprint %s)\n", m.tokenizer.c_str(),
                static_cast<long long>(m.vocab_size), m.fingerprint.c_str());
    std::fflush(stdout);
    ds.check_tokens_below(m.vocab_size, "");  // the check training makes, reported here first
    if (m.tokenizer == "byte" || std::filesystem::exists(m.tokenizer)) {
      tok = tokenizer_from_flag(m.tokenizer);
      if (tokenizer_fingerprint(*tok) != m.fingerprint) {
        std::printf(
            "sample:    (not decoded: %s has changed since the dataset was made; pass "
            "--tokenizer)\n",
            m.tokenizer.c_str());
        return 0;
      }
    }
  }
  if (!tok || ds.documents() == 0) {
    std::printf("sample:    (no tokenizer known; pass --tokenizer to decode one)\n");
    return 0;
  }
  std::vector<int32_t> ids = ds.document(0);
  if (static_cast<int64_t>(ids.size()) > sample_tokens)
    ids.resize(static_cast<size_t>(sample_tokens));
  std::printf("sample:    document 0, first %zu tokens:\n%s\n", ids.size(),
              tok->decode(ids).c_str());
  return 0;
}

}  // namespace

Command add_data_command(CLI::App& root) {
  CLI::App* data = root.add_subcommand("data", "Prepare and inspect tokenized datasets");
  data->require_subcommand(1);
  auto tokenizer_flag = std::make_shared<std::string>();
  CLI::App* tok = data->add_subcommand(
      "tokenize", "Encode JSON strings read one per line from stdin; print {ids, text} JSON lines");
  tok->add_option("--tokenizer", *tokenizer_flag, "tokenizer.json (file or directory), or 'byte'")
      ->required();

  auto popt = std::make_shared<PrepareOptions>();
  CLI::App* prep = data->add_subcommand(
      "prepare", "Tokenize text or JSONL files into a Megatron indexed dataset");
  prep->add_option("--input", popt->inputs, "input files, directories or globs")->required();
  prep->add_option("--format", popt->format, "text (one document per file) or jsonl (one per line)")
      ->check(CLI::IsMember({"text", "jsonl"}));
  prep->add_option("--jsonl-key", popt->jsonl_key, "JSONL field holding the document text");
  prep->add_option("--tokenizer", popt->tokenizer, "tokenizer.json (file or directory), or 'byte'")
      ->required();
  prep->add_option("--output", popt->output,
                   "output path prefix: writes PREFIX.bin, PREFIX.idx, PREFIX.json")
      ->required();
  prep->add_flag("--append-eos", popt->append_eos,
                 "end every document with the tokenizer's end-of-text token");
  prep->add_option("--workers", popt->workers, "tokenizer threads")->check(CLI::Range(1, 256));
  prep->add_flag("--skip-bad", popt->skip_bad, "skip and count bad documents instead of stopping");

  auto prefix = std::make_shared<std::string>();
  auto inspect_tok = std::make_shared<std::string>();
  auto sample = std::make_shared<int64_t>(64);
  CLI::App* insp = data->add_subcommand(
      "inspect", "Print counts, dtype and a decoded sample of an indexed dataset");
  insp->add_option("prefix", *prefix, "dataset path prefix (PREFIX.bin/.idx)")->required();
  insp->add_option("--tokenizer", *inspect_tok,
                   "tokenizer to decode the sample with (default: the one recorded)");
  insp->add_option("--sample-tokens", *sample, "tokens of document 0 to decode")
      ->check(CLI::Range(int64_t(0), int64_t(1) << 30));

  return {data, [=]() {
            if (tok->parsed()) return tokenize(*tokenizer_flag);
            if (prep->parsed()) {
              popt->progress = isatty(2);
              return prepare(*popt);
            }
            if (insp->parsed()) return inspect(*prefix, *inspect_tok, *sample);
            return 1;
          }};
}

}  // namespace llmrun::cli
