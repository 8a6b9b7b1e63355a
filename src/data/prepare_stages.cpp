#include "data/prepare_stages.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>

#include "data/utf8.h"
#include "util/error.h"
#include "util/file_io.h"

namespace llmrun {

namespace {

constexpr size_t kBatchBytes = 1 << 20;

std::string where(const std::vector<std::string>& files, const PrepareDoc& d) {
  std::string s = files[d.file];
  if (d.line > 0) s.append(":").append(std::to_string(d.line));
  return s;
}

}  // namespace

void read_batches(const std::vector<std::string>& files, bool jsonl,
                  const std::function<bool(std::unique_ptr<PrepareBatch>)>& emit) {
  auto batch = std::make_unique<PrepareBatch>();
  size_t bytes = 0;
  auto flush = [&](bool last) {
    batch->last = last;
    const bool ok = emit(std::move(batch));
    batch = std::make_unique<PrepareBatch>();
    bytes = 0;
    return ok;
  };
  try {
    for (uint32_t f = 0; f < files.size(); ++f) {
      if (!jsonl) {
        batch->docs.push_back({f, 0, read_file(files[f])});
        bytes += batch->docs.back().text.size();
      } else {
        std::ifstream in(files[f], std::ios::binary);
        if (!in) throw UserError(files[f] + ": cannot open for reading");
        std::string line;
        for (int64_t n = 1; std::getline(in, line); ++n) {
          bytes += line.size() + 1;
          batch->docs.push_back({f, n, std::move(line)});
          line.clear();
          if (bytes >= kBatchBytes && !flush(false)) return;
        }
        if (in.bad()) throw UserError(files[f] + ": read error");
      }
      if (bytes >= kBatchBytes && !flush(false)) return;
    }
  } catch (...) {
    batch->read_error = std::current_exception();
  }
  flush(true);
}

std::string BatchTokenizer::document_text(PrepareDoc& d, std::string& error) const {
  if (opt_.format != "jsonl") {
    const size_t bad = utf8_invalid_at(d.text);
    if (bad != std::string_view::npos) {
      const int64_t line =
          1 + std::count(d.text.begin(), d.text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
      error = files_[d.file] + ":" + std::to_string(line) + ": invalid UTF-8 at byte " +
              std::to_string(bad);
      return "";
    }
    return std::move(d.text);
  }
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(d.text);
  } catch (const nlohmann::json::parse_error& e) {
    error = where(files_, d) + ": malformed JSON line: " + e.what();
    return "";
  }
  const std::string& key = opt_.jsonl_key;
  if (!j.is_object() || !j.contains(key)) {
    error = where(files_, d) + ": no \"" + key + "\" key (choose the field with --jsonl-key)";
    return "";
  }
  if (!j[key].is_string()) {
    error = where(files_, d) + ": \"" + key + "\" is not a string";
    return "";
  }
  return j[key].get<std::string>();  // JSON text is always valid UTF-8
}

void BatchTokenizer::run(PrepareBatch& b) const {
  const bool jsonl = opt_.format == "jsonl";
  b.lengths.assign(b.docs.size(), -1);
  b.errors.assign(b.docs.size(), "");
  for (size_t i = 0; i < b.docs.size(); ++i) {
    PrepareDoc& d = b.docs[i];
    b.bytes += static_cast<int64_t>(d.text.size()) + (jsonl ? 1 : 0);
    if (jsonl &&
        d.text.find_first_not_of(" \t\r") == std::string::npos) {  // blank line: no document
      b.lengths[i] = 0;
      continue;
    }
    const std::string text = document_text(d, b.errors[i]);
    if (!b.errors[i].empty()) continue;
    try {
      std::vector<int32_t> ids = tok_.encode(text);
      if (!ids.empty() && opt_.append_eos) ids.push_back(tok_.eos_id());
      b.lengths[i] = static_cast<int64_t>(ids.size());
      b.ids.insert(b.ids.end(), ids.begin(), ids.end());
    } catch (const UserError& e) {
      b.errors[i] = where(files_, d) + ": " + e.what();
    }
    std::string().swap(d.text);
  }
}

void OrderedWriter::write(const PrepareBatch& b) {
  if (b.read_error) std::rethrow_exception(b.read_error);
  const int32_t* ids = b.ids.data();
  for (size_t i = 0; i < b.docs.size(); ++i) {
    if (!b.errors[i].empty()) {
      if (!opt_.skip_bad) throw UserError(b.errors[i] + " (--skip-bad skips bad documents)");
      if (rep_.skipped++ == 0) rep_.first_skipped = b.errors[i];
      continue;
    }
    if (b.lengths[i] == 0) {
      ++rep_.empty;
      continue;
    }
    out_.add_document(ids, static_cast<size_t>(b.lengths[i]));
    ids += b.lengths[i];
    ++rep_.documents;
    rep_.tokens += b.lengths[i];
  }
  rep_.bytes += b.bytes;
}

}  // namespace llmrun
