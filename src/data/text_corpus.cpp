#include "data/text_corpus.h"

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "util/error.h"
#include "util/file_io.h"

namespace fs = std::filesystem;

namespace llmrun {

static std::vector<fs::path> list_documents(const std::vector<std::string>& paths,
                                            const std::string& what) {
  std::vector<fs::path> docs;
  for (const std::string& p : paths) {
    std::error_code ec;
    const fs::file_status st = fs::status(p, ec);
    if (!fs::exists(st))
      throw UserError(what + ": " + p + ": " +
                      (ec ? ec.message() : std::string("no such file or directory")));
    if (!fs::is_directory(st)) {
      docs.emplace_back(p);
      continue;
    }
    std::vector<fs::path> found;
    for (auto it = fs::recursive_directory_iterator(p, ec); !ec && it != fs::end(it);
         it.increment(ec))
      if (it->is_regular_file()) found.push_back(it->path());
    if (ec) throw UserError(what + ": " + p + ": cannot list directory: " + ec.message());
    // Directory iteration order is whatever the filesystem returns; sorting makes
    // the token stream, and so the whole run, reproducible.
    std::sort(found.begin(), found.end());
    docs.insert(docs.end(), found.begin(), found.end());
  }
  return docs;
}

std::vector<int32_t> load_token_corpus(const std::vector<std::string>& paths, const Tokenizer& tok,
                                       int64_t min_tokens, const std::string& what) {
  const std::vector<int32_t> separator =
      tok.eos_id() >= 0 ? std::vector<int32_t>{tok.eos_id()} : tok.encode("\n\n");
  std::vector<int32_t> tokens;
  bool first = true;
  for (const fs::path& doc : list_documents(paths, what)) {
    if (!first) tokens.insert(tokens.end(), separator.begin(), separator.end());
    first = false;
    const std::vector<int32_t> ids = tok.encode(read_file(doc));
    tokens.insert(tokens.end(), ids.begin(), ids.end());
  }
  if (static_cast<int64_t>(tokens.size()) < min_tokens)
    throw UserError(what + ": only " + std::to_string(tokens.size()) +
                    " tokens, need at least seq_len + 1 = " + std::to_string(min_tokens) +
                    "; add text or lower model.seq_len");
  return tokens;
}

WindowSampler::WindowSampler(std::span<const int32_t> corpus, int64_t window, uint64_t seed)
    : corpus_(corpus), window_(window), seed_(seed), rng_(seed) {
  LLMRUN_CHECK(window > 0 && static_cast<uint64_t>(window) <= corpus.size(),
               "window longer than the corpus");
}

uint64_t WindowSampler::next_offset() {
  // Multiply-shift instead of std::uniform_int_distribution, whose algorithm differs
  // between standard libraries; mt19937_64 itself is fully specified, so offsets are
  // the same everywhere. One engine output per draw also makes seek() a discard.
  const uint64_t range = corpus_.size() - static_cast<uint64_t>(window_) + 1;
  return static_cast<uint64_t>((static_cast<unsigned __int128>(rng_()) * range) >> 64);
}

void WindowSampler::next(int32_t* dst) {
  const uint64_t offset = next_offset();
  std::memcpy(dst, corpus_.data() + offset, static_cast<size_t>(window_) * sizeof(int32_t));
  ++drawn_;
}

void WindowSampler::seek(uint64_t position) {
  rng_.seed(seed_);
  rng_.discard(position);
  drawn_ = position;
}

}  // namespace llmrun
