#include "data/data_prepare.h"

#include <glob.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <thread>

#include "data/bounded_queue.h"
#include "data/prepare_stages.h"
#include "util/error.h"

namespace fs = std::filesystem;

namespace llmrun {

namespace {

bool has_glob_chars(const std::string& s) { return s.find_first_of("*?[") != std::string::npos; }

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
        for (auto it = fs::recursive_directory_iterator(m, ec); !ec && it != fs::end(it);
             it.increment(ec))
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

namespace {

// A batch on its way from the reader through a worker to the writer; the writer waits on
// `tokenized` in input order, whichever worker finishes first.
struct PrepareJob {
  std::unique_ptr<PrepareBatch> batch;
  std::promise<void> tokenized;                      // set by the worker
  std::future<void> ready = tokenized.get_future();  // waited on by the writer
};

// The progress line: at most twice a second, and once at the end.
class PrepareProgress {
 public:
  PrepareProgress(bool on, std::chrono::steady_clock::time_point t0)
      : on_(on), t0_(t0), last_(t0) {}
  void print(const PrepareReport& rep, bool final) {
    const auto now = std::chrono::steady_clock::now();
    if (!on_ || (!final && now - last_ < std::chrono::milliseconds(500))) return;
    last_ = now;
    const double s = std::max(1e-9, std::chrono::duration<double>(now - t0_).count());
    std::fprintf(
        stderr, "\rprepare: %.1f MB, %lld docs, %lld tokens | %.1f MB/s, %.2fM tokens/s   %s",
        rep.bytes / 1e6, static_cast<long long>(rep.documents), static_cast<long long>(rep.tokens),
        rep.bytes / 1e6 / s, rep.tokens / 1e6 / s, final ? "\n" : "");
    std::fflush(stderr);
  }

 private:
  bool on_;
  std::chrono::steady_clock::time_point t0_, last_;
};

void check_options(const PrepareOptions& opt) {
  if (opt.format != "text" && opt.format != "jsonl")
    throw UserError("--format " + opt.format + ": expected text or jsonl");
  if (opt.workers < 1 || opt.workers > 256) throw UserError("--workers must be between 1 and 256");
  if (opt.output.empty()) throw UserError("--output: a path prefix is required");
  const fs::path out_dir = fs::path(opt.output).parent_path();
  if (!out_dir.empty() && !fs::is_directory(out_dir))
    throw UserError("--output " + opt.output + ": directory " + out_dir.string() +
                    " does not exist");
}

// Reader -> workers -> ordered writer. `order` holds every batch read and not yet written, in
// input order, and bounds them (memory stays bounded whatever the input size); `work` hands
// the same batches to whichever worker is free. Closing both queues ends every thread.
void run_stages(const std::vector<std::string>& files, const PrepareOptions& opt,
                const Tokenizer& tok, OrderedWriter& writer,
                const std::function<void()>& on_written) {
  const size_t in_flight = 3 * size_t(opt.workers);
  BoundedQueue<std::shared_ptr<PrepareJob>> order(in_flight), work(in_flight + 1);
  std::thread reader([&] {
    read_batches(files, opt.format == "jsonl", [&](std::unique_ptr<PrepareBatch> b) {
      auto job = std::make_shared<PrepareJob>();
      job->batch = std::move(b);
      return order.push(job) && work.push(job);
    });
  });
  const BatchTokenizer tokenize(files, opt, tok);
  std::vector<std::thread> workers;
  for (int w = 0; w < opt.workers; ++w)
    workers.emplace_back([&] {
      while (const std::optional<std::shared_ptr<PrepareJob>> job = work.pop()) {
        if (!(*job)->batch->read_error) tokenize.run(*(*job)->batch);
        (*job)->tokenized.set_value();
      }
    });
  auto shutdown = [&] {
    order.close();
    work.close();
    reader.join();
    for (std::thread& t : workers) t.join();
  };
  try {
    for (bool last = false; !last;) {
      const std::shared_ptr<PrepareJob> job = *order.pop();  // only this thread closes `order`
      job->ready.wait();
      writer.write(*job->batch);
      last = job->batch->last;
      on_written();
    }
  } catch (...) {
    shutdown();
    throw;
  }
  shutdown();
}

}  // namespace

PrepareReport prepare_dataset(const PrepareOptions& opt) {
  check_options(opt);
  const std::vector<std::string> files = expand_inputs(opt.inputs);
  const std::unique_ptr<Tokenizer> tok = opt.tokenizer == "byte"
                                             ? std::make_unique<ByteLevelTokenizer>()
                                             : load_tokenizer(opt.tokenizer);
  if (opt.append_eos && tok->eos_id() < 0)
    throw UserError("--append-eos: the tokenizer " + opt.tokenizer + " has no end-of-text token");

  PrepareReport rep;
  rep.files = static_cast<int64_t>(files.size());
  const auto t0 = std::chrono::steady_clock::now();
  IndexedDatasetWriter out(opt.output, token_dtype_for_vocab(tok->vocab_size()));
  OrderedWriter writer(out, opt, rep);
  PrepareProgress progress(opt.progress, t0);
  run_stages(files, opt, *tok, writer, [&] { progress.print(rep, false); });
  if (rep.documents == 0)
    throw UserError("--input: no documents with any tokens; nothing to write");
  DatasetMeta meta;
  meta.tokenizer = opt.tokenizer == "byte" ? "byte" : fs::absolute(opt.tokenizer).string();
  meta.vocab_size = tok->vocab_size();
  meta.fingerprint = tokenizer_fingerprint(*tok);
  meta.documents = rep.documents;
  meta.tokens = rep.tokens;
  out.finish(meta);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  progress.print(rep, true);
  return rep;
}

}  // namespace llmrun
