#include "util/stop_signal.h"

#include <unistd.h>

#include <csignal>

namespace llmrun {

namespace {

volatile std::sig_atomic_t g_signal = 0;
struct sigaction g_old_term, g_old_int, g_old_usr1;

void on_signal(int sig) {
  if (g_signal != 0) _exit(128 + sig);  // second signal: the user wants out now
  g_signal = sig;
  static const char msg[] =
      "\nllmrun: stopping after this step (checkpointing); signal again to quit now\n";
  (void)!write(STDERR_FILENO, msg, sizeof msg - 1);
}

}  // namespace

StopSignals::StopSignals() {
  g_signal = 0;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;  // the step in flight keeps going as if nothing happened
  sigaction(SIGTERM, &sa, &g_old_term);
  sigaction(SIGINT, &sa, &g_old_int);
  // mpirun forwards SIGUSR1 to every rank (SIGTERM would make it kill them); Slurm's
  // --signal=USR1@T uses it for "time is nearly up".
  sigaction(SIGUSR1, &sa, &g_old_usr1);
}

StopSignals::~StopSignals() {
  sigaction(SIGTERM, &g_old_term, nullptr);
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGUSR1, &g_old_usr1, nullptr);
}

bool StopSignals::requested() const { return g_signal != 0; }
int StopSignals::signal() const { return g_signal; }

}  // namespace llmrun
