#include "train/progress.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "util/atomic_dir.h"
#include "util/error.h"

namespace llmrun {

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  long s = std::lround(seconds);
  char buf[32];
  if (s >= 3600)
    std::snprintf(buf, sizeof buf, "%ldh%02ldm", s / 3600, (s / 60) % 60);
  else if (s >= 60)
    std::snprintf(buf, sizeof buf, "%ldm%02lds", s / 60, s % 60);
  else
    std::snprintf(buf, sizeof buf, "%lds", s);
  return buf;
}

std::string format_progress(const StepReport& r) {
  char buf[256];
  std::snprintf(
      buf, sizeof buf,
      "step %lld/%lld | loss %.4f | lr %.3e | grad-norm %.3f | %.0f tok/s | MFU %.1f%% | ETA %s",
      static_cast<long long>(r.stats.step), static_cast<long long>(r.total_steps), r.stats.loss,
      r.stats.lr, r.stats.grad_norm, r.tokens_per_s, 100.0 * r.mfu,
      format_duration(r.eta_seconds).c_str());
  std::string line = buf;
  if (r.multi_rank) {
    const double mem = double(r.memory.params + r.memory.grads + r.memory.optimizer +
                              r.memory.buffers + r.memory.staging + r.activation_bytes);
    std::snprintf(buf, sizeof buf, " | comm %.0f%% | %.1f MB/rank", 100.0 * r.comm_share,
                  mem / 1e6);
    line += buf;
  }
  return line;
}

ProgressPrinter::ProgressPrinter() : tty_(isatty(STDERR_FILENO)) {}

void ProgressPrinter::update(const StepReport& r, bool logged_step) {
  if (tty_) {
    std::fprintf(stderr, "\r\033[K%s", format_progress(r).c_str());
    open_line_ = true;
    if (r.stats.step == r.total_steps) finish();
  } else if (logged_step) {
    std::fprintf(stderr, "%s\n", format_progress(r).c_str());
  }
  std::fflush(stderr);
}

void ProgressPrinter::finish() {
  if (open_line_) std::fprintf(stderr, "\n");
  open_line_ = false;
}

// A metrics line that cannot be written (disk full, quota, I/O error) does not stop training:
// losing a line of a days-long run is better than losing the run, and the checkpoints and the
// exported model, which do stop it, are what the run is for. The failure is loud instead: a
// warning with the cause at the first lost line, again at 10, 100, 1000... lost lines, when
// writing works again, and a count at the end. A failed write is cut back to the last
// complete line, so the file never holds half a line. Resuming, which rewrites the kept lines,
// does fail the start: nothing is trained yet, and the old file is left as it was.
MetricsWriter::MetricsWriter(const std::string& path, int64_t resumed_step) : path_(path) {
  if (path.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(std::filesystem::path(path).parent_path(), ec);
  std::string kept;
  if (resumed_step > 0) {
    std::ifstream in(path);
    for (std::string line; std::getline(in, line);) {
      const auto j = nlohmann::json::parse(line, nullptr, false);
      if (!j.is_discarded() && j.is_object() && j.value("step", int64_t(0)) <= resumed_step)
        kept += line + "\n";
    }
  }
  if (!kept.empty()) {
    try {
      write_file_atomic(path, kept);
    } catch (const UserError& e) {
      throw UserError(std::string("logging.metrics: ") + e.what());
    }
  }
  fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | (kept.empty() ? O_TRUNC : O_APPEND),
               0644);
  if (fd_ < 0)
    throw UserError("logging.metrics: cannot write " + path + ": " + std::strerror(errno));
  good_size_ = int64_t(kept.size());
}

MetricsWriter::~MetricsWriter() {
  if (fd_ < 0) return;
  ::close(fd_);
  if (lost_ > 0)
    spdlog::warn(
        "logging.metrics: {} of {} lines could not be written to {}; the file is missing those "
        "steps",
        lost_, lines_, path_);
}

void MetricsWriter::append(const std::string& line) {
  if (fd_ < 0) return;
  ++lines_;
  size_t done = 0;
  int err = 0;
  while (done < line.size()) {
    const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EIO;
      break;
    }
    done += size_t(n);
  }
  if (err == 0) {
    good_size_ += int64_t(line.size());
    if (lost_ > 0 && lines_ - 1 == last_lost_line_)
      spdlog::warn("logging.metrics: writing {} works again ({} lines lost so far)", path_, lost_);
    return;
  }
  // No half line: cut a partial write back (O_APPEND writes at the end, so this is exact).
  if (done > 0) (void)!::ftruncate(fd_, good_size_);
  ++lost_;
  last_lost_line_ = lines_;
  if (lost_ == 1 || lost_ == next_warning_) {
    spdlog::warn("logging.metrics: cannot write {}: {}; {} line{} lost so far; training goes on",
                 path_, std::strerror(err), lost_, lost_ == 1 ? "" : "s");
    if (lost_ >= next_warning_) next_warning_ *= 10;
  }
}

void gather_stage_reports(StepReport& rep, Communicator& pp) {
  // Seven scalar sums per stage, each rank filling its own slot: a handful of tiny collectives
  // on logged steps only, and exact for byte counts (no float tensor rounding).
  rep.stages.assign(pp.size(), {});
  for (int p = 0; p < pp.size(); ++p) {
    auto share = [&](double mine) {
      return pp.all_reduce_scalar(p == pp.rank() ? mine : 0.0, ReduceOp::sum);
    };
    StageReport& s = rep.stages[p];
    s.memory.params = size_t(share(double(rep.memory.params)));
    s.memory.grads = size_t(share(double(rep.memory.grads)));
    s.memory.optimizer = size_t(share(double(rep.memory.optimizer)));
    s.memory.buffers = size_t(share(double(rep.memory.buffers)));
    s.memory.staging = size_t(share(double(rep.memory.staging)));
    s.activation_bytes = size_t(share(double(rep.activation_bytes)));
    s.pipeline_idle = share(rep.pipeline_idle);
  }
}

void MetricsWriter::write(const StepReport& r) {
  if (fd_ < 0 && !sink_) return;
  nlohmann::json j{{"step", r.stats.step},
                   {"loss", r.stats.loss},
                   {"lr", r.stats.lr},
                   {"grad_norm", r.stats.grad_norm},
                   {"tokens_per_s", r.tokens_per_s},
                   {"mfu", r.mfu},
                   {"step_s", r.step_seconds},
                   {"comm_share", r.comm_share},
                   {"pipeline_idle", r.pipeline_idle},
                   {"mem_params", r.memory.params},
                   {"mem_grads", r.memory.grads},
                   {"mem_optimizer", r.memory.optimizer},
                   {"mem_buffers", r.memory.buffers},
                   {"mem_staging", r.memory.staging},
                   {"mem_activations", r.activation_bytes}};
  if (r.moe) {
    j["moe_aux_loss"] = r.moe_aux_loss;
    j["moe_z_loss"] = r.moe_z_loss;
    j["moe_dropped"] = r.moe_dropped;
    j["moe_load_min"] = r.moe_load_min;
    j["moe_load_max"] = r.moe_load_max;
  }
  if (r.fp8) {
    j["fp8_overflows"] = r.fp8_overflows;
    j["fp8_underflows"] = r.fp8_underflows;
  }
  for (size_t p = 0; p < r.stages.size(); ++p) {
    const StageReport& s = r.stages[p];
    j["stages"].push_back({{"stage", p},
                           {"pipeline_idle", s.pipeline_idle},
                           {"mem_params", s.memory.params},
                           {"mem_grads", s.memory.grads},
                           {"mem_optimizer", s.memory.optimizer},
                           {"mem_buffers", s.memory.buffers},
                           {"mem_staging", s.memory.staging},
                           {"mem_activations", s.activation_bytes}});
  }
  if (sink_) sink_(j);
  if (fd_ >= 0) append(j.dump() + "\n");
}

void MetricsWriter::write_validation(int64_t step, double val_loss) {
  if (fd_ < 0 && !sink_) return;
  nlohmann::json j{{"step", step}, {"val_loss", val_loss}, {"val_ppl", std::exp(val_loss)}};
  if (sink_) sink_(j);
  if (fd_ >= 0) append(j.dump() + "\n");
}

}  // namespace llmrun
