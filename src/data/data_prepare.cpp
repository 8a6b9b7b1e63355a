#include "data/data_prepare.h"

#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <thread>

#include "data/indexed_dataset.h"
#include "data/utf8.h"
#include "util/error.h"
#include "util/file_io.h"

namespace fs = std::filesystem;

namespace llmrun {

namespace {

constexpr size_t kBatchBytes = 1 << 20;

struct Doc {
  uint32_t file;
  int64_t line;  // 1-based JSONL line; 0 for a whole text file
  std::string text;
};

struct Batch {
  std::vector<Doc> docs;
  std::exception_ptr read_error;  // reading failed here: the run stops when the writer gets to it
  bool last = false;
  // Filled by a worker:
  std::vector<int32_t> ids;
  std::vector<int64_t> lengths;     // per doc; -1 for a bad one
  std::vector<std::string> errors;  // per doc, "" when fine
  int64_t bytes = 0;
};

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

std::string where(const std::vector<std::string>& files, const Doc& d) {
  std::string s = files[d.file];
  if (d.line > 0) s.append(":").append(std::to_string(d.line));
  return s;
}

}  // namespace

std::vector<std::string> expand_inputs(const std::vector<std::string>& inputs) {
  std::vector<std::string> files;
  for (const std::string& in : inputs) {
    std::vector<std::string> matches;
    if (has_glob_chars(in) && !fs::exists(in)) {
      glob_t g{};
      const int rc = ::glob(in.c_str(), 0, nullptr, &g);
      for (size_t i = 0; rc == 0 && i < g.gl_pathc; ++i) matches.emplace_back(g.gl_pathv[i]);
      globfree(&g);
      if (matches.empty()) throw UserError("--input " + in + ": the pattern matches no files");
    } else {
      matches.push_back(in);
    }
    for (const std::string& m : matches) {
      std::error_code ec;
      if (fs::is_directory(m, ec)) {
        std::vector<std::string> found;
        for (auto it = fs::recursive_directory_iterator(m, ec); !ec && it != fs::end(it); it.increment(ec))
          if (it->is_regular_file()) found.push_back(it->path().string());
        if (ec) throw UserError("--input " + m + ": cannot list directory: " + ec.message());
        std::sort(found.begin(), found.end());
        files.insert(files.end(), found.begin(), found.end());
      } else if (fs::exists(m, ec)) {
        files.push_back(m);
      } else {
        throw UserError("--input " + m + ": no such file or directory");
      }
    }
  }
  if (files.empty()) throw UserError("--input: no input files");
  return files;
}

PrepareReport prepare_dataset(const PrepareOptions& opt) {
  if (opt.format != "text" && opt.format != "jsonl")
    throw UserError("--format " + opt.format + ": expected text or jsonl");
  if (opt.workers < 1 || opt.workers > 256) throw UserError("--workers must be between 1 and 256");
  if (opt.output.empty()) throw UserError("--output: a path prefix is required");
  const fs::path out_dir = fs::path(opt.output).parent_path();
  if (!out_dir.empty() && !fs::is_directory(out_dir))
    throw UserError("--output " + opt.output + ": directory " + out_dir.string() + " does not exist");
  const std::vector<std::string> files = expand_inputs(opt.inputs);
  const std::unique_ptr<Tokenizer> tok =
      opt.tokenizer == "byte" ? std::make_unique<ByteLevelTokenizer>() : load_tokenizer(opt.tokenizer);
  if (opt.append_eos && tok->eos_id() < 0)
    throw UserError("--append-eos: the tokenizer " + opt.tokenizer + " has no end-of-text token");
  const bool jsonl = opt.format == "jsonl";

  PrepareReport rep;
  rep.files = static_cast<int64_t>(files.size());
  const auto t0 = std::chrono::steady_clock::now();
  IndexedDatasetWriter writer(opt.output, token_dtype_for_vocab(tok->vocab_size()));

  // Pipeline state, guarded by mu. `in_flight` bounds batches read but not yet written.
  std::mutex mu;
  std::condition_variable cv;
  std::map<uint64_t, std::unique_ptr<Batch>> done;
  uint64_t next_work = 0, read_count = 0;
  std::map<uint64_t, std::unique_ptr<Batch>> pending;  // seq -> batch waiting for a worker
  bool stop = false;
  const uint64_t max_in_flight = 3 * uint64_t(opt.workers) + 1;
  uint64_t written = 0;

  auto submit = [&](std::unique_ptr<Batch> b) {
    std::unique_lock lk(mu);
    cv.wait(lk, [&] { return stop || read_count - written < max_in_flight; });
    if (stop) return false;
    pending.emplace(read_count++, std::move(b));
    cv.notify_all();
    return true;
  };

  std::thread reader([&] {
    auto batch = std::make_unique<Batch>();
    size_t bytes = 0;
    auto flush = [&](bool last) {
      batch->last = last;
      const bool ok = submit(std::move(batch));
      batch = std::make_unique<Batch>();
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
  });

  auto work = [&](Batch& b) {
    b.lengths.assign(b.docs.size(), -1);
    b.errors.assign(b.docs.size(), "");
    for (size_t i = 0; i < b.docs.size(); ++i) {
      Doc& d = b.docs[i];
      b.bytes += static_cast<int64_t>(d.text.size()) + (jsonl ? 1 : 0);
      std::string text;
      if (jsonl) {
        if (d.text.find_first_not_of(" \t\r") == std::string::npos) {  // blank line: no document
          b.lengths[i] = 0;
          continue;
        }
        nlohmann::json j;
        try {
          j = nlohmann::json::parse(d.text);
        } catch (const nlohmann::json::parse_error& e) {
          b.errors[i] = where(files, d) + ": malformed JSON line: " + e.what();
          continue;
        }
        if (!j.is_object() || !j.contains(opt.jsonl_key)) {
          b.errors[i] = where(files, d) + ": no \"" + opt.jsonl_key + "\" key (choose the field with --jsonl-key)";
          continue;
        }
        if (!j[opt.jsonl_key].is_string()) {
          b.errors[i] = where(files, d) + ": \"" + opt.jsonl_key + "\" is not a string";
          continue;
        }
        text = j[opt.jsonl_key].get<std::string>();  // JSON text is always valid UTF-8
      } else {
        const size_t bad = utf8_invalid_at(d.text);
        if (bad != std::string_view::npos) {
          const int64_t line = 1 + std::count(d.text.begin(), d.text.begin() + static_cast<std::ptrdiff_t>(bad), '\n');
          b.errors[i] = files[d.file] + ":" + std::to_string(line) + ": invalid UTF-8 at byte " + std::to_string(bad);
          continue;
        }
        text = std::move(d.text);
      }
      try {
        std::vector<int32_t> ids = tok->encode(text);
        if (!ids.empty() && opt.append_eos) ids.push_back(tok->eos_id());
        b.lengths[i] = static_cast<int64_t>(ids.size());
        b.ids.insert(b.ids.end(), ids.begin(), ids.end());
      } catch (const UserError& e) {
        b.errors[i] = where(files, d) + ": " + e.what();
      }
      std::string().swap(d.text);
    }
  };

  std::vector<std::thread> workers;
  for (int w = 0; w < opt.workers; ++w)
    workers.emplace_back([&] {
      for (;;) {
        std::unique_ptr<Batch> b;
        uint64_t seq;
        {
          std::unique_lock lk(mu);
          cv.wait(lk, [&] { return stop || pending.count(next_work); });
          if (stop) return;
          seq = next_work++;
          b = std::move(pending[seq]);
          pending.erase(seq);
        }
        if (!b->read_error) work(*b);
        std::lock_guard lk(mu);
        done.emplace(seq, std::move(b));
        cv.notify_all();
      }
    });

  auto shutdown = [&] {
    {
      std::lock_guard lk(mu);
      stop = true;
    }
    cv.notify_all();
    reader.join();
    for (auto& t : workers) t.join();
  };

  auto last_print = t0;
  auto print_progress = [&](bool final) {
    const auto now = std::chrono::steady_clock::now();
    if (!opt.progress || (!final && now - last_print < std::chrono::milliseconds(500))) return;
    last_print = now;
    const double s = std::max(1e-9, std::chrono::duration<double>(now - t0).count());
    std::fprintf(stderr, "\rprepare: %.1f MB, %lld docs, %lld tokens | %.1f MB/s, %.2fM tokens/s   %s",
                 rep.bytes / 1e6, static_cast<long long>(rep.documents), static_cast<long long>(rep.tokens),
                 rep.bytes / 1e6 / s, rep.tokens / 1e6 / s, final ? "\n" : "");
    std::fflush(stderr);
  };

  try {
    for (bool last = false; !last;) {
      std::unique_ptr<Batch> b;
      {
        std::unique_lock lk(mu);
        cv.wait(lk, [&] { return done.count(written); });
        b = std::move(done[written]);
        done.erase(written);
      }
      if (b->read_error) std::rethrow_exception(b->read_error);
      const int32_t* ids = b->ids.data();
      for (size_t i = 0; i < b->docs.size(); ++i) {
        if (!b->errors[i].empty()) {
          if (!opt.skip_bad) throw UserError(b->errors[i] + " (--skip-bad skips bad documents)");
          if (rep.skipped++ == 0) rep.first_skipped = b->errors[i];
          continue;
        }
        if (b->lengths[i] == 0) {
          ++rep.empty;
          continue;
        }
        writer.add_document(ids, static_cast<size_t>(b->lengths[i]));
        ids += b->lengths[i];
        ++rep.documents;
        rep.tokens += b->lengths[i];
      }
      rep.bytes += b->bytes;
      last = b->last;
      {
        std::lock_guard lk(mu);
        ++written;
      }
      cv.notify_all();
      print_progress(false);
    }
  } catch (...) {
    shutdown();
    throw;
  }
  shutdown();
  if (rep.documents == 0) throw UserError("--input: no documents with any tokens; nothing to write");
  DatasetMeta meta;
  meta.tokenizer = opt.tokenizer == "byte" ? "byte" : fs::absolute(opt.tokenizer).string();
  meta.vocab_size = tok->vocab_size();
  meta.fingerprint = tokenizer_fingerprint(*tok);
  meta.documents = rep.documents;
  meta.tokens = rep.tokens;
  writer.finish(meta);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  print_progress(true);
  return rep;
}

}  // namespace llmrun
