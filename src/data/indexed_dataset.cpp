#include "data/indexed_dataset.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <nlohmann/json.hpp>

#include "util/atomic_dir.h"
#include "util/error.h"
#include "util/json_file.h"

namespace fs = std::filesystem;

namespace llmrun {

namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', 0, 0};

template <typename T>
void put(std::string& s, T v) {  // little-endian hosts only (x86-64, aarch64)
  s.append(reinterpret_cast<const char*>(&v), sizeof v);
}

}  // namespace

TokenDType token_dtype_for_vocab(int64_t vocab_size) {
  return vocab_size < 65500 ? TokenDType::u16 : TokenDType::i32;
}
size_t dtype_bytes(TokenDType t) { return t == TokenDType::u16 ? 2 : 4; }
const char* dtype_name(TokenDType t) { return t == TokenDType::u16 ? "uint16" : "int32"; }

std::string tokenizer_fingerprint(const Tokenizer& tok) {
  uint64_t h = 1469598103934665603ull;
  for (unsigned char c : tok.tokenizer_json_text()) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
  return buf;
}

bool is_indexed_dataset(const std::string& prefix) {
  return fs::is_regular_file(prefix + ".idx") && fs::is_regular_file(prefix + ".bin");
}

IndexedDatasetWriter::IndexedDatasetWriter(const std::string& prefix, TokenDType dtype)
    : prefix_(prefix), dtype_(dtype) {
  std::error_code ec;
  fs::remove(prefix + ".idx", ec);  // the old dataset stops looking complete from here on
  if (ec) throw_io_error(prefix + ".idx", "cannot remove the previous index", ec.value());
  bin_ = std::make_unique<FileWriter>(prefix + ".bin.tmp");
}

IndexedDatasetWriter::~IndexedDatasetWriter() {
  if (finished_) return;
  std::error_code ec;
  bin_.reset();
  for (const char* ext : {".bin.tmp", ".idx.tmp", ".json.tmp"}) fs::remove(prefix_ + ext, ec);
}

void IndexedDatasetWriter::add_document(const int32_t* ids, size_t n) {
  if (n > static_cast<size_t>(INT32_MAX))
    throw UserError("a document of " + std::to_string(n) + " tokens is too long");
  const size_t w = dtype_bytes(dtype_);
  const size_t at = buf_.size();
  buf_.resize(at + n * w);
  if (dtype_ == TokenDType::u16) {
    for (size_t i = 0; i < n; ++i) {
      const uint16_t v = static_cast<uint16_t>(ids[i]);
      std::memcpy(buf_.data() + at + 2 * i, &v, 2);
    }
  } else {
    std::memcpy(buf_.data() + at, ids, n * 4);
  }
  bin_bytes_ += int64_t(n * w);
  if (buf_.size() >= (8u << 20)) {  // FileWriter is unbuffered: write in large blocks
    bin_->write(buf_.data(), buf_.size());
    buf_.clear();
  }
  for (size_t i = 0; i < n; ++i) max_token_ = std::max<int64_t>(max_token_, ids[i]);
  lengths_.push_back(static_cast<int32_t>(n));
  tokens_ += static_cast<int64_t>(n);
}

void IndexedDatasetWriter::finish(const DatasetMeta& meta) {
  bin_->write(buf_.data(), buf_.size());
  buf_.clear();
  bin_->sync();
  bin_->close();
  const uint64_t n = lengths_.size();
  std::string idx;
  idx.reserve(34 + n * 12 + (n + 1) * 8);
  idx.append(kMagic, sizeof kMagic);
  put<uint64_t>(idx, 1);
  put<uint8_t>(idx, static_cast<uint8_t>(dtype_));
  put<uint64_t>(idx, n);      // sequences
  put<uint64_t>(idx, n + 1);  // document indices, with the leading 0
  for (int32_t len : lengths_) put<int32_t>(idx, len);
  int64_t ptr = 0;
  for (int32_t len : lengths_) {
    put<int64_t>(idx, ptr);
    ptr += int64_t(len) * int64_t(dtype_bytes(dtype_));
  }
  for (uint64_t d = 0; d <= n; ++d) put<int64_t>(idx, static_cast<int64_t>(d));
  nlohmann::ordered_json j = {{"format", "megatron-mmididx"},
                              {"dtype", dtype_name(dtype_)},
                              {"documents", meta.documents},
                              {"tokens", meta.tokens},
                              {"tokenizer", meta.tokenizer},
                              {"tokenizer_vocab_size", meta.vocab_size},
                              {"tokenizer_fingerprint", meta.fingerprint},
                              // Lets readers check ids against a vocabulary without a scan
                              // (IndexedDataset::max_token), while the .bin keeps this size.
                              {"max_token", max_token_},
                              {"bin_bytes", bin_bytes_}};
  std::error_code ec;
  fs::rename(prefix_ + ".bin.tmp", prefix_ + ".bin", ec);
  if (ec) throw_io_error(prefix_ + ".bin", "cannot rename into place", ec.value());
  write_file_atomic(prefix_ + ".json", j.dump(2) + "\n");
  write_file_atomic(prefix_ + ".idx", idx);  // last: its presence means the dataset is complete
  finished_ = true;
}

IndexedDataset::IndexedDataset(const std::string& prefix) : prefix_(prefix) {
  const std::string idx_path = prefix + ".idx";
  MappedFile idx(idx_path);
  auto bad = [&](const std::string& why) {
    return UserError(idx_path + ": not a Megatron MMIDIDX index (" + why + ")");
  };
  const auto* p = reinterpret_cast<const char*>(idx.data());
  const size_t size = idx.size();
  if (size < 34 || std::memcmp(p, kMagic, sizeof kMagic) != 0) throw bad("bad magic header");
  uint64_t version, nseq, ndoc;
  uint8_t code;
  std::memcpy(&version, p + 9, 8);
  std::memcpy(&code, p + 17, 1);
  std::memcpy(&nseq, p + 18, 8);
  std::memcpy(&ndoc, p + 26, 8);
  if (version != 1) throw bad("version " + std::to_string(version) + ", expected 1");
  if (code == 8)
    dtype_ = TokenDType::u16;
  else if (code == 4)
    dtype_ = TokenDType::i32;
  else
    throw bad("token dtype code " + std::to_string(code) +
              "; llmrun reads uint16 (8) and int32 (4)");
  if (nseq > (size - 34) / 12 || ndoc > (size - 34 - nseq * 12) / 8)
    throw bad("it is truncated: " + std::to_string(size) + " bytes for " + std::to_string(nseq) +
              " sequences and " + std::to_string(ndoc) + " document indices");
  lengths_.resize(nseq);
  pointers_.resize(nseq);
  std::memcpy(lengths_.data(), p + 34, nseq * 4);
  std::memcpy(pointers_.data(), p + 34 + nseq * 4, nseq * 8);
  // Document boundaries: 0, then each document's end as a sequence index, rising to nseq.
  // Readers do not use them (llmrun writes one sequence per document) but a bad list means
  // the index was damaged or written by something that disagrees with this layout.
  std::vector<int64_t> docs(ndoc);
  std::memcpy(docs.data(), p + 34 + nseq * 12, ndoc * 8);
  if (ndoc == 0 || docs[0] != 0) throw bad("its document index does not start at 0");
  for (uint64_t d = 1; d < ndoc; ++d)
    if (docs[d] < docs[d - 1] || docs[d] > int64_t(nseq))
      throw bad("document index " + std::to_string(d) + " is " + std::to_string(docs[d]) +
                ", outside 0.." + std::to_string(nseq) + " or below the one before it");
  if (docs.back() != int64_t(nseq))
    throw bad("its last document ends at sequence " + std::to_string(docs.back()) +
              ", not at the end (" + std::to_string(nseq) + ")");
  bin_ = std::make_unique<MappedFile>(prefix + ".bin");
  const size_t w = dtype_bytes(dtype_);
  for (uint64_t i = 0; i < nseq; ++i) {
    if (lengths_[i] < 0 || pointers_[i] < 0 ||
        uint64_t(pointers_[i]) + uint64_t(lengths_[i]) * w > bin_->size())
      throw UserError(prefix + ".bin: sequence " + std::to_string(i) + " lies outside the file (" +
                      std::to_string(bin_->size()) +
                      " bytes); the .bin and .idx do not belong together");
    // Sequences lie back to back in order (Megatron's writer): one that starts inside the
    // one before it would train on the same tokens twice under two names.
    if (i > 0 && pointers_[i] < pointers_[i - 1] + int64_t(lengths_[i - 1]) * int64_t(w))
      throw bad("sequence " + std::to_string(i) + " starts at byte " +
                std::to_string(pointers_[i]) + ", inside sequence " + std::to_string(i - 1) +
                " (bytes " + std::to_string(pointers_[i - 1]) + ".." +
                std::to_string(pointers_[i - 1] + int64_t(lengths_[i - 1]) * int64_t(w)) + ")");
    tokens_ += lengths_[i];
  }
}

int64_t IndexedDataset::max_token() const {
  // `data prepare` records the largest id in PREFIX.json with the .bin's size; a .bin changed
  // since (another size, or written after the .json) is scanned instead: a max over the
  // mapped tokens, at memory speed.
  const std::string json_path = prefix_ + ".json";
  std::error_code ec;
  const auto json_time = fs::last_write_time(json_path, ec);
  if (!ec && fs::last_write_time(prefix_ + ".bin", ec) <= json_time && !ec) {
    const nlohmann::json j = nlohmann::json::parse(read_file(json_path), nullptr, false);
    if (j.is_object() && j.value("bin_bytes", int64_t(-1)) == int64_t(bin_->size()) &&
        j.contains("max_token") && j["max_token"].is_number_integer())
      return j["max_token"].get<int64_t>();
  }
  int64_t best = -1;
  const size_t n = bin_->size() / dtype_bytes(dtype_);
  if (dtype_ == TokenDType::u16) {
    uint16_t m = 0;
    const auto* t = reinterpret_cast<const unsigned char*>(bin_->data());
    for (size_t i = 0; i < n; ++i)
      m = std::max<uint16_t>(m, uint16_t(t[2 * i] | (t[2 * i + 1] << 8)));
    best = n ? m : -1;
  } else {
    int32_t m = n ? INT32_MIN : -1;
    for (size_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, bin_->data() + 4 * i, 4);
      m = std::max(m, v < 0 ? INT32_MAX : v);  // a negative id is as wrong as a huge one
    }
    best = m;
  }
  return best;
}

void IndexedDataset::check_tokens_below(int64_t vocab, const std::string& what) const {
  if (max_token() < vocab) return;
  // Rare and fatal: find the first offender for the message.
  std::vector<int32_t> ids;
  for (int64_t d = 0; d < documents(); ++d) {
    ids = document(d);
    for (size_t i = 0; i < ids.size(); ++i)
      if (ids[i] < 0 || ids[i] >= vocab)
        throw UserError(
            what + prefix_ + ".bin: token id " + std::to_string(ids[i]) + " at document " +
            std::to_string(d) + ", position " + std::to_string(i) + " (byte " +
            std::to_string(pointers_[d] + int64_t(i * dtype_bytes(dtype_))) +
            ") is outside the vocabulary of " + std::to_string(vocab) +
            " tokens; the file is damaged or was made with another tokenizer (re-run `llmrun data "
            "prepare`)");
  }
  // The offender lies between documents (bytes no sequence covers): never read, so harmless.
}

void IndexedDataset::read(int64_t doc, int64_t offset, int64_t n, int32_t* dst) const {
  LLMRUN_CHECK(doc >= 0 && doc < documents() && offset >= 0 && offset + n <= lengths_[doc],
               "read outside a document");
  const std::byte* src = bin_->data() + pointers_[doc];
  if (dtype_ == TokenDType::u16) {
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, src + 2 * (offset + i), 2);
      dst[i] = v;
    }
  } else {
    std::memcpy(dst, src + 4 * offset, size_t(n) * 4);
  }
}

std::vector<int32_t> IndexedDataset::document(int64_t doc) const {
  std::vector<int32_t> ids(static_cast<size_t>(lengths_[doc]));
  read(doc, 0, lengths_[doc], ids.data());
  return ids;
}

DatasetMeta IndexedDataset::meta() const {
  const std::string path = prefix_ + ".json";
  if (!fs::is_regular_file(path))
    throw UserError(path +
                    ": missing; llmrun records which tokenizer made a dataset there: "
                    "rebuild it with `llmrun data prepare`");
  const nlohmann::json j = read_json_file(path);
  try {
    DatasetMeta m;
    m.tokenizer = j.at("tokenizer").get<std::string>();
    m.vocab_size = j.at("tokenizer_vocab_size").get<int64_t>();
    m.fingerprint = j.at("tokenizer_fingerprint").get<std::string>();
    m.documents = j.at("documents").get<int64_t>();
    m.tokens = j.at("tokens").get<int64_t>();
    return m;
  } catch (const nlohmann::json::exception& e) {
    throw UserError(path + ": malformed dataset metadata: " + e.what());
  }
}

}  // namespace llmrun
