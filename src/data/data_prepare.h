#pragma once
// `llmrun data prepare`: text or JSONL files -> a Megatron indexed dataset, tokenized by a
// pool of workers. One reader streams documents in batches, workers tokenize batches in
// parallel, and the writer appends them in input order; at most a few batches per worker
// are in flight, so memory stays bounded whatever the input size.
#include <cstdint>
#include <string>
#include <vector>

namespace llmrun {

struct PrepareOptions {
  std::vector<std::string> inputs;  // files, directories (all files below) or glob patterns
  std::string format = "text";      // text: one document per file; jsonl: one per line
  std::string jsonl_key = "text";
  std::string tokenizer = "byte";  // tokenizer.json path or "byte"
  std::string output;              // PREFIX
  bool append_eos = false;
  int workers = 1;
  bool skip_bad = false;  // count and skip bad documents instead of stopping at the first
  bool progress = false;  // live progress line on stderr
};

struct PrepareReport {
  int64_t files = 0, documents = 0, tokens = 0, bytes = 0;
  int64_t skipped = 0, empty = 0;  // bad documents skipped (--skip-bad), documents with no tokens
  std::string first_skipped;       // "file:line: reason" of the first skipped document
  double seconds = 0;
};

// The files `inputs` name, in the order given (directories and globs expanded and sorted).
// UserError for a path that does not exist or a glob that matches nothing.
std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs);

// UserError ("file:line: reason") for bad input unless skip_bad.
PrepareReport prepare_dataset(const PrepareOptions& opt);

}  // namespace llmrun
