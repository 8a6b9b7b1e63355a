#pragma once
// Megatron-LM's indexed dataset (MMIDIDX): PREFIX.bin holds every document's tokens back to
// back, PREFIX.idx the layout Megatron's _IndexWriter writes:
//   b"MMIDIDX\x00\x00", u64 version 1, u8 dtype code, u64 sequence count, u64 document count,
//   i32 sequence lengths[sequence count], i64 byte pointers[sequence count],
//   i64 document indices[document count]   (0, then the end of each document)
// all little-endian. llmrun writes one sequence per document. PREFIX.json beside them records
// which tokenizer made the ids, so training can refuse a dataset from another tokenizer.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "data/tokenizer.h"
#include "util/file_io.h"
#include "util/mapped_file.h"

namespace llmrun {

enum class TokenDType : uint8_t { u16 = 8, i32 = 4 };  // Megatron's DType codes
// Megatron's rule (best_fitting_dtype): uint16 below 65500 tokens, else int32.
TokenDType token_dtype_for_vocab(int64_t vocab_size);
size_t dtype_bytes(TokenDType t);
const char* dtype_name(TokenDType t);

// A stable fingerprint of a tokenizer (FNV-1a of its tokenizer.json text), stored in PREFIX.json.
std::string tokenizer_fingerprint(const Tokenizer& tok);

// What PREFIX.json says about the dataset.
struct DatasetMeta {
  std::string tokenizer;  // the --tokenizer given to data prepare (absolute path or "byte")
  int64_t vocab_size = 0;
  std::string fingerprint;
  int64_t documents = 0, tokens = 0;
};

// Streams documents into PREFIX.bin.tmp / .idx.tmp / .json.tmp; finish() renames them into
// place with .idx last. Until then (and after any failure) no PREFIX.idx exists: an old one is
// removed when writing starts, so an interrupted run never leaves a complete-looking dataset.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(const std::string& prefix, TokenDType dtype);
  ~IndexedDatasetWriter();  // removes the temporary files unless finish() ran
  void add_document(const int32_t* ids, size_t n);
  void finish(const DatasetMeta& meta);
  int64_t documents() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t tokens() const { return tokens_; }

 private:
  std::string prefix_;
  TokenDType dtype_;
  std::unique_ptr<FileWriter> bin_;
  std::vector<int32_t> lengths_;
  std::vector<char> buf_;
  int64_t tokens_ = 0;
  int64_t max_token_ = -1, bin_bytes_ = 0;
  bool finished_ = false;
};

// A read-only view of PREFIX.bin/.idx (memory-mapped), validated against the layout above.
class IndexedDataset {
 public:
  explicit IndexedDataset(const std::string& prefix);  // UserError naming the file if malformed
  int64_t documents() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t tokens() const { return tokens_; }
  TokenDType dtype() const { return dtype_; }
  int64_t length(int64_t doc) const { return lengths_[doc]; }
  // Copies `n` tokens of document `doc` starting at token `offset` into dst.
  void read(int64_t doc, int64_t offset, int64_t n, int32_t* dst) const;
  std::vector<int32_t> document(int64_t doc) const;
  // PREFIX.json; UserError if it is missing (datasets from other tools: rerun data prepare).
  DatasetMeta meta() const;
  const std::string& prefix() const { return prefix_; }
  // The largest token id in the .bin (-1 when empty; a negative int32 counts as huge):
  // from PREFIX.json when it still describes this .bin, else by a scan of the mapped file.
  int64_t max_token() const;
  // UserError naming the file and the first token id >= vocab (document, position, byte), if
  // any: checked once when a dataset is opened for training, so a damaged or foreign .bin
  // fails at once instead of mid-run in the embedding. `what` prefixes the message.
  void check_tokens_below(int64_t vocab, const std::string& what) const;

 private:
  std::string prefix_;
  std::unique_ptr<MappedFile> bin_;
  TokenDType dtype_ = TokenDType::u16;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  int64_t tokens_ = 0;
};

// True when PREFIX.idx and PREFIX.bin both exist.
bool is_indexed_dataset(const std::string& prefix);

}  // namespace llmrun
