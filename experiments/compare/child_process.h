// Running compare's and sweep's child processes: one program per measurement, its output in a
// log file, a time limit, and Ctrl-C passed on (the child is in our process group and gets the
// SIGINT too; we wait for it and report the interruption instead of leaving it behind).
#pragma once
#include <string>
#include <vector>

namespace sl::compare {

struct ChildResult {
  int exit_code = -1;     // the child's exit status; -1 when it was killed by a signal
  int signal = 0;         // the signal that killed it, 0 if none
  bool timed_out = false; // killed by us after the time limit
  bool interrupted = false;  // we got SIGINT / SIGTERM while it ran
  double seconds = 0;
  bool ok() const { return exit_code == 0 && !timed_out && !interrupted; }
  std::string describe() const;  // "exit 1", "killed by signal 9", "timed out after 600 s", ...
};

// Runs argv[0] (a path) with argv, stdout and stderr appended to `log_path`. Throws sl::Error
// when the program cannot be started.
ChildResult run_child(const std::vector<std::string>& argv, const std::string& log_path, double timeout_s,
                      const std::vector<std::pair<std::string, std::string>>& extra_env = {});

// The last `lines` lines of a log file ("" when unreadable), for error messages.
std::string tail_of(const std::string& path, size_t lines = 20);

// The running program's own path (/proc/self/exe), to start children of the same build.
std::string self_executable();

// "45s", "3m05s", "1h02m": a duration for progress lines.
std::string clock_text(double seconds);

// True once SIGINT, SIGTERM or SIGHUP arrived (installs the handlers on first call).
bool interrupt_requested();
// That signal's number (0 when none arrived): the process exits with 128 + it, as the shell
// reports a process the signal ended.
int interrupt_signal();
void install_interrupt_handlers();

}  // namespace sl::compare
