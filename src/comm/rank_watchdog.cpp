#include "comm/rank_watchdog.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

namespace llmrun {

int rank_from_environment() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "SLURM_PROCID"})
    if (const char* v = std::getenv(name); v && *v) return std::atoi(v);
  return -1;
}

RankWatchdog::RankWatchdog(int rank, double timeout_s)
    : rank_(rank), timeout_s_(timeout_s), parent_(long(getppid())), launcher_(0) {
  if (const char* v = std::getenv(kLauncherPidEnv); v && *v) launcher_ = std::atol(v);
  thread_ = std::thread([this] { run(); });
}

RankWatchdog::~RankWatchdog() {
  {
    std::lock_guard lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void RankWatchdog::begin_phase(std::string what) {
  std::lock_guard lock(mu_);
  phase_ = std::move(what);
  deadline_ = std::chrono::steady_clock::now() +
              std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                  std::chrono::duration<double>(timeout_s_));
}

void RankWatchdog::end_phase() {
  std::lock_guard lock(mu_);
  phase_.clear();
}

void RankWatchdog::set_rank(int rank) {
  std::lock_guard lock(mu_);
  rank_ = rank;
}

void RankWatchdog::die(const std::string& why) {
  std::fprintf(stderr, "\nerror: rank %d: %s\n", rank_, why.c_str());
  std::fflush(stderr);
  _exit(1);
}

void RankWatchdog::run() {
  std::unique_lock lock(mu_);
  // A quarter second between looks: the launcher's death is noticed at once for a human,
  // and the thread costs nothing measurable.
  while (!cv_.wait_for(lock, std::chrono::milliseconds(250), [this] { return stopping_; })) {
    if (!phase_.empty() && std::chrono::steady_clock::now() > deadline_)
      die(phase_ + " did not complete within launch.timeout_s=" + std::to_string(int(timeout_s_)) +
          " s: another rank failed to start or stalled there");
    if (long(getppid()) != parent_)
      die("the launcher that started this rank (parent pid " + std::to_string(parent_) +
          ") is gone; exiting");
    if (launcher_ > 0 && kill(pid_t(launcher_), 0) != 0 && errno == ESRCH)
      die("the llmrun --nproc process that started this job (pid " + std::to_string(launcher_) +
          ") is gone; exiting");
  }
}

}  // namespace llmrun
