#include "experiments/compare/child_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <thread>

#include "core/error.h"

namespace sl::compare {

namespace {

volatile sig_atomic_t g_interrupted = 0;  // the signal that arrived (0: none)
void on_signal(int sig) { g_interrupted = sig; }

}  // namespace

void install_interrupt_handlers() {
  static bool installed = false;
  if (installed) return;
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  // SIGHUP (a closed terminal) stops in the same order, unless the caller ignores it: under
  // `nohup` a long sweep must outlive its terminal, and its children keep the ignored disposition
  // across exec.
  struct sigaction hup {};
  if (!(sigaction(SIGHUP, nullptr, &hup) == 0 && !(hup.sa_flags & SA_SIGINFO) && hup.sa_handler == SIG_IGN))
    sigaction(SIGHUP, &sa, nullptr);
  installed = true;
}

bool interrupt_requested() {
  install_interrupt_handlers();
  return g_interrupted != 0;
}

int interrupt_signal() { return int(g_interrupted); }

std::string ChildResult::describe() const {
  if (interrupted) return "interrupted";
  if (timed_out) {
    char t[32];
    std::snprintf(t, sizeof t, seconds < 10 ? "%.1f" : "%.0f", seconds);  // --child-timeout 0.3 is not "0 s"
    return "timed out after " + std::string(t) + " s";
  }
  if (signal) return std::string("killed by signal ") + std::to_string(signal) + " (" + strsignal(signal) + ")";
  return "exit " + std::to_string(exit_code);
}

ChildResult run_child(const std::vector<std::string>& argv, const std::string& log_path, double timeout_s,
                      const std::vector<std::pair<std::string, std::string>>& extra_env) {
  SL_CHECK(!argv.empty(), "run_child: no program");
  install_interrupt_handlers();
  const int log = ::open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  SL_CHECK(log >= 0, "cannot open the log '", log_path, "': ", std::strerror(errno));
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) {
    ::close(log);
    fail("cannot start '", argv[0], "': fork failed: ", std::strerror(errno));
  }
  if (pid == 0) {
    // A child must not outlive a killed parent: it would go on writing into a folder that the
    // next run removes as stale.
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    ::dup2(log, 1);
    ::dup2(log, 2);
    ::close(log);
    for (const auto& [k, v] : extra_env) ::setenv(k.c_str(), v.c_str(), 1);
    ::execv(args[0], args.data());
    std::fprintf(stderr, "cannot execute '%s': %s\n", args[0], std::strerror(errno));
    ::_exit(127);
  }
  ::close(log);
  ChildResult r;
  int status = 0;
  bool killed = false;
  for (;;) {
    const pid_t w = ::waitpid(pid, &status, WNOHANG);
    if (w == pid) break;
    if (w < 0 && errno != EINTR) fail("waitpid for '", argv[0], "' failed: ", std::strerror(errno));
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!killed && (g_interrupted || r.seconds > timeout_s)) {
      // The child normally got the SIGINT itself (same process group); a time-out or a SIGTERM
      // sent to us alone needs passing on. SIGKILL after a grace period.
      r.timed_out = !g_interrupted;
      r.interrupted = g_interrupted != 0;
      ::kill(pid, SIGTERM);
      for (int i = 0; i < 50 && ::waitpid(pid, &status, WNOHANG) == 0; ++i)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      if (::waitpid(pid, &status, WNOHANG) == 0) {
        ::kill(pid, SIGKILL);
        ::waitpid(pid, &status, 0);
      }
      killed = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (g_interrupted) r.interrupted = true;
  if (WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  return r;
}

std::string tail_of(const std::string& path, size_t lines) {
  std::ifstream f(path);
  if (!f) return "";
  std::deque<std::string> last;
  std::string line;
  while (std::getline(f, line)) {
    last.push_back(line);
    if (last.size() > lines) last.pop_front();
  }
  std::string out;
  for (const auto& l : last) out += "  | " + l + "\n";
  return out;
}

std::string clock_text(double seconds) {
  const int s = int(seconds + 0.5);
  char buf[32];
  if (s >= 3600) std::snprintf(buf, sizeof buf, "%dh%02dm", s / 3600, (s / 60) % 60);
  else if (s >= 60) std::snprintf(buf, sizeof buf, "%dm%02ds", s / 60, s % 60);
  else std::snprintf(buf, sizeof buf, "%ds", s);
  return buf;
}

std::string self_executable() {
  char buf[4096];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof buf - 1);
  SL_CHECK(n > 0, "cannot find this program's path (/proc/self/exe): ", std::strerror(errno));
  buf[n] = 0;
  return buf;
}

}  // namespace sl::compare
