// The in-place progress line of long commands (see terminal_progress.h).
#include "util/terminal_progress.h"

#include <unistd.h>

#include <cstdio>

namespace llmrun {

TerminalProgress::TerminalProgress(std::string what, double total, std::string unit,
                                   bool shown_here)
    : what_(std::move(what)),
      unit_(std::move(unit)),
      total_(total),
      tty_(shown_here && isatty(STDERR_FILENO)),
      start_(std::chrono::steady_clock::now()) {}

TerminalProgress::~TerminalProgress() { finish(); }

void TerminalProgress::advance(double amount) {
  std::lock_guard<std::mutex> lock(mu_);
  done_ += amount;
  const auto now = std::chrono::steady_clock::now();
  if (tty_ && now - last_draw_ >= std::chrono::milliseconds(250)) {
    last_draw_ = now;
    draw();
  }
}

void TerminalProgress::draw() {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  if (total_ > 0)
    std::fprintf(stderr, "\r\033[K%s: %.1f / %.1f %s (%.0f%%) %.1f %s/s", what_.c_str(), done_,
                 total_, unit_.c_str(), 100.0 * done_ / total_, s > 0 ? done_ / s : 0.0,
                 unit_.c_str());
  else
    std::fprintf(stderr, "\r\033[K%s: %.1f %s", what_.c_str(), done_, unit_.c_str());
  std::fflush(stderr);
  open_ = true;
}

void TerminalProgress::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  if (!tty_ || !open_) return;
  draw();  // the final numbers, then the line is left as it is
  std::fprintf(stderr, "\n");
  std::fflush(stderr);
  open_ = false;
}

}  // namespace llmrun
