#pragma once
// A progress line for long commands (convert, ...): redrawn in place on stderr, a few times a
// second, when stderr is a terminal; nothing at all when it is piped or redirected, so logs
// and scripts see only the summary lines. advance() may be called from several threads (a
// checkpoint writes its groups at once).
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace llmrun {

class TerminalProgress {
 public:
  // `what` names the work ("converting"); `total` is in `unit`s ("MB"), 0 when unknown.
  // `shown_here` false keeps it quiet (every rank but the first of a multi-rank run).
  TerminalProgress(std::string what, double total, std::string unit, bool shown_here = true);
  ~TerminalProgress();  // ends the line
  void advance(double amount);
  void finish();
  bool shown() const { return tty_; }

 private:
  void draw();
  std::mutex mu_;
  std::string what_, unit_;
  double total_, done_ = 0;
  bool tty_, open_ = false;
  std::chrono::steady_clock::time_point start_, last_draw_{};
};

}  // namespace llmrun
