// The stages of `llmrun data prepare` (data_prepare.cpp connects them with bounded queues):
// a reader that cuts the input files into batches of documents, workers that tokenize a batch,
// and an ordered writer that appends batches to the dataset in input order.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/data_prepare.h"
#include "data/indexed_dataset.h"
#include "data/tokenizer.h"

namespace llmrun {

struct PrepareDoc {
  uint32_t file;
  int64_t line;  // 1-based JSONL line; 0 for a whole text file
  std::string text;
};

struct PrepareBatch {
  std::vector<PrepareDoc> docs;
  std::exception_ptr read_error;  // reading failed here: the run stops when the writer gets to it
  bool last = false;
  // Filled by a worker:
  std::vector<int32_t> ids;
  std::vector<int64_t> lengths;     // per doc; -1 for a bad one, 0 for a blank JSONL line
  std::vector<std::string> errors;  // per doc, "" when fine
  int64_t bytes = 0;
};

// Reads `files` (whole text files, or JSONL lines) into batches of about 1 MB and hands each to
// `emit`, the last one marked; a read error travels in the batch where it happened. Stops early
// when `emit` returns false (the run is being abandoned).
void read_batches(const std::vector<std::string>& files, bool jsonl,
                  const std::function<bool(std::unique_ptr<PrepareBatch>)>& emit);

// A worker's job: checks (UTF-8, JSON, the key) and tokenizes each document of `b`.
class BatchTokenizer {
 public:
  BatchTokenizer(const std::vector<std::string>& files, const PrepareOptions& opt,
                 const Tokenizer& tok)
      : files_(files), opt_(opt), tok_(tok) {}
  void run(PrepareBatch& b) const;

 private:
  std::string document_text(PrepareDoc& d, std::string& error) const;  // "" + error when bad
  const std::vector<std::string>& files_;
  const PrepareOptions& opt_;
  const Tokenizer& tok_;
};

// Appends tokenized batches, given in input order, to the dataset and counts them in `rep`.
// UserError at the first bad document unless --skip-bad; rethrows a batch's read error.
class OrderedWriter {
 public:
  OrderedWriter(IndexedDatasetWriter& out, const PrepareOptions& opt, PrepareReport& rep)
      : out_(out), opt_(opt), rep_(rep) {}
  void write(const PrepareBatch& b);

 private:
  IndexedDatasetWriter& out_;
  const PrepareOptions& opt_;
  PrepareReport& rep_;
};

}  // namespace llmrun
