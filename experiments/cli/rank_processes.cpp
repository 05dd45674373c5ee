#include "experiments/cli/rank_processes.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "core/error.h"
#include "experiments/cli/backend_choice.h"
#include "core/socket_group.h"

namespace sl::cli {

namespace {

std::string log_path(const std::string& dir, int rank) { return dir + "/rank" + std::to_string(rank) + ".log"; }

// A fresh private folder for the group's socket and the ranks' logs. Unix-domain socket paths
// are short (107 bytes), so a long $TMPDIR falls back to /tmp.
std::string make_run_dir() {
  const char* tmp = std::getenv("TMPDIR");
  std::string base = tmp && *tmp ? tmp : "/tmp";
  if (base.size() > 60) base = "/tmp";
  std::string pattern = base + "/streamlab-ranks-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  SL_CHECK(::mkdtemp(buf.data()) != nullptr, "--rank-launch processes: cannot create a folder for the ranks under ",
           base, ": ", std::strerror(errno));
  return buf.data();
}

}  // namespace

RankOf parse_rank_of(const std::string& spec) {
  const size_t colon = spec.find(':');
  SL_CHECK(colon != std::string::npos && colon > 0 && colon + 1 < spec.size(), "--rank-of '", spec,
           "': expected RANK:SOCKET (set by rank 0 when it starts the other ranks; not for direct use)");
  RankOf r;
  try {
    size_t used = 0;
    r.rank = std::stoi(spec.substr(0, colon), &used);
    SL_CHECK(used == colon && r.rank >= 1, "bad rank");
  } catch (const std::exception&) {
    fail("--rank-of '", spec, "': the rank must be an integer >= 1");
  }
  r.socket = spec.substr(colon + 1);
  return r;
}

RankProcesses::RankProcesses(char** argv, int world) {
  SL_CHECK(argv && argv[0], "--rank-launch processes: this process's command line is unknown");
  SL_CHECK(world >= 2, "--rank-launch processes needs at least 2 ranks");
  // Children must stay waitable: an inherited "ignore SIGCHLD" would have the kernel reap them,
  // and their exit statuses (a crash among them) would be lost.
  ::signal(SIGCHLD, SIG_DFL);
  dir_ = make_run_dir();
  try {
    start(argv, world);
  } catch (...) {
    reap(0.0);  // the ranks already started: killed and reaped
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
    throw;
  }
}

void RankProcesses::start(char** argv, int world) {
  socket_ = dir_ + "/group.sock";
  // The copies run this very binary (not whatever "streamlab" PATH finds now).
  std::error_code ec;
  const std::string self = std::filesystem::read_symlink("/proc/self/exe", ec).string();
  SL_CHECK(!ec, "--rank-launch processes: cannot find this program (/proc/self/exe): ", ec.message());
  std::fflush(nullptr);  // nothing buffered may be written twice by the children
  const pid_t parent = ::getpid();
  for (int r = 1; r < world; ++r) {
    std::vector<std::string> args;
    for (char** a = argv; *a; ++a) args.emplace_back(*a);
    args.push_back("--rank-of");
    args.push_back(std::to_string(r) + ":" + socket_);
    const std::string log = log_path(dir_, r);
    const pid_t pid = ::fork();
    SL_CHECK(pid >= 0, "--rank-launch processes: fork for rank ", r, ": ", std::strerror(errno));
    if (pid == 0) {
      // The child: die with rank 0, write to its own log, become the copy.
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(120);  // rank 0 already gone
      const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
      if (fd < 0) ::_exit(121);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      const int devnull = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
      if (devnull >= 0) ::dup2(devnull, STDIN_FILENO);  // dup2 clears close-on-exec on stdin only
      std::vector<char*> cargs;
      for (std::string& a : args) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      ::execv(self.c_str(), cargs.data());
      std::fprintf(stderr, "rank %d: cannot start %s: %s\n", r, self.c_str(), std::strerror(errno));
      ::_exit(122);
    }
    pids_.push_back(pid);
    status_.push_back(0);
    killed_.push_back(false);
  }
}

std::unique_ptr<Communicator> RankProcesses::join(double timeout_s) {
  return join_socket_group(socket_, 0, int(pids_.size()) + 1, timeout_s, [this] {
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] < 0) continue;
      int st = 0;
      if (::waitpid(pids_[i], &st, WNOHANG) == pids_[i]) {
        pids_[i] = -1;
        status_[i] = st;
        fail("rank ", i + 1, " ended while the group was forming: ", describe_exit(int(i) + 1, st));
      }
    }
  });
}

std::string RankProcesses::log_tail(int rank) const {
  std::ifstream in(log_path(dir_, rank));
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::ostringstream os;
  const size_t from = lines.size() > 4 ? lines.size() - 4 : 0;
  for (size_t i = from; i < lines.size(); ++i) os << "\n  rank " << rank << "| " << lines[i];
  return lines.empty() ? std::string(" (its log is empty)") : os.str();
}

std::string RankProcesses::describe_exit(int rank, int status) const {
  std::ostringstream os;
  if (killed_[size_t(rank - 1)])
    os << "still running " << kGraceSeconds << " s after rank 0 failed, so rank 0 killed it";
  else if (status == kStatusUnknown)
    os << "its exit status is unknown (reaped by someone else)";
  else if (WIFEXITED(status))
    os << "exit status " << WEXITSTATUS(status);
  else if (WIFSIGNALED(status))
    os << "killed by signal " << WTERMSIG(status) << " (" << strsignal(WTERMSIG(status)) << ")";
  else
    os << "status " << status;
  os << "; the end of its log:" << log_tail(rank);
  return os.str();
}

void RankProcesses::finish() {
  reap(-1);
  for (size_t i = 0; i < status_.size(); ++i)
    if (status_[i] != 0) {
      described_ = true;  // how_ranks_ended must not say it again
      fail("rank ", i + 1, " failed: ", describe_exit(int(i) + 1, status_[i]));
    }
}

std::string RankProcesses::how_ranks_ended(double grace_s) {
  reap(grace_s);
  if (described_) return "";
  described_ = true;
  std::string out;
  for (size_t i = 0; i < status_.size(); ++i)
    if (status_[i] != 0) out += "\nrank " + std::to_string(i + 1) + " ended: " + describe_exit(int(i) + 1, status_[i]);
  return out;
}

// Waits for every rank (grace_s < 0: as long as it takes); after grace_s seconds, kills the rest.
void RankProcesses::reap(double grace_s) {
  const auto t0 = std::chrono::steady_clock::now();
  for (;;) {
    bool left = false;
    for (size_t i = 0; i < pids_.size(); ++i) {
      if (pids_[i] < 0) continue;
      int st = 0;
      const pid_t got = ::waitpid(pids_[i], &st, grace_s < 0 ? 0 : WNOHANG);
      if (got == pids_[i]) {
        status_[i] = st;
        pids_[i] = -1;
      } else if (got < 0 && errno == ECHILD) {
        status_[i] = kStatusUnknown;  // not ours to wait for any more: not known to have ended well
        pids_[i] = -1;
      } else {
        left = true;
      }
    }
    if (!left) return;
    if (grace_s >= 0 && std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() > grace_s) {
      for (size_t i = 0; i < pids_.size(); ++i)
        if (pids_[i] > 0 && ::kill(pids_[i], SIGKILL) == 0) killed_[i] = true;
      grace_s = -1;  // and wait for them to go
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void RankProcesses::report_and_clean_up(const std::string& why) {
  const std::string ranks = how_ranks_ended();
  std::fprintf(stderr, "streamlab: error: %s%s\n", why.c_str(), ranks.c_str());
  std::fflush(stderr);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

namespace {
// Checked before any rank starts.
char** check_gpus(char** argv, int world, bool cuda) {
  SL_CHECK(!cuda || gpu_count() >= world, world, " ranks on the CUDA backend need a GPU each; this process sees ",
           gpu_count());
  return argv;
}
}  // namespace

RankGroup::RankGroup(char** argv, int world, bool cuda) : processes_(check_gpus(argv, world, cuda), world) {
  host_ = processes_.join();
  if (!cuda) return;
  gpu_ = make_gpu_group(*host_);
  on_gpu_rank_gone(*gpu_, [this](const std::string& why) {
    host_->abort("rank 0 stops: " + why);
    processes_.report_and_clean_up(why);
  });
}

std::string RankGroup::gpu_description() const { return gpu_ ? gpu_group_description(*gpu_) : ""; }

void RankGroup::finish() {
  comm().finish();
  processes_.finish();
}

std::string RankGroup::stop_after_failure() {
  comm().abort("rank 0 failed");
  return processes_.how_ranks_ended();
}

RankProcesses::~RankProcesses() {
  reap(kGraceSeconds);
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

}  // namespace sl::cli
