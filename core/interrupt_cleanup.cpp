#include "core/interrupt_cleanup.h"

#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <iterator>  // std::size
#include <mutex>  // std::call_once

namespace sl {
namespace {

constexpr int kSlots = 64;
// A slot is written only while free (state 0), then published with state 2. The handler claims
// a published slot (2 -> 3) before it reads it, and an owner releasing its slot (2 -> 1 -> 0)
// leaves a claimed one alone: a path is never read while it is rewritten. State 1: being filled
// or emptied.
char g_path[kSlots][PATH_MAX];
bool g_folder[kSlots];
std::atomic<int> g_state[kSlots];
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[std::size(kSignals)];
std::once_flag g_installed;

// Removes what the folder `dir_fd` holds, then the folder, with async-signal-safe calls only
// (getdents64, unlinkat, openat: no opendir, which allocates). Staging folders are shallow; past
// kMaxDepth levels what is left stays.
constexpr int kMaxDepth = 4;
alignas(8) char g_dirents[kMaxDepth][4096];

void remove_folder_contents(int dir_fd, int depth) {
  for (;;) {
    const long n = ::syscall(SYS_getdents64, dir_fd, g_dirents[depth], sizeof g_dirents[depth]);
    if (n <= 0) return;
    for (long off = 0; off < n;) {
      struct Entry {
        uint64_t ino;
        int64_t off;
        unsigned short reclen;
        unsigned char type;
        char name[1];
      };
      const Entry* e = reinterpret_cast<const Entry*>(g_dirents[depth] + off);
      off += e->reclen;
      if (e->name[0] == '.' && (e->name[1] == 0 || (e->name[1] == '.' && e->name[2] == 0))) continue;
      // (Some filesystems do not give the type, DT_UNKNOWN: a failed unlink of a folder says so.)
      if (e->type == DT_DIR || (::unlinkat(dir_fd, e->name, 0) != 0 && (errno == EISDIR || errno == EPERM))) {
        if (depth + 1 < kMaxDepth) {
          const int sub = ::openat(dir_fd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
          if (sub >= 0) {
            remove_folder_contents(sub, depth + 1);
            ::close(sub);
          }
        }
        ::unlinkat(dir_fd, e->name, AT_REMOVEDIR);
      }
    }
  }
}

std::atomic<int> g_handling{0};

void on_interrupt(int sig) {
  // One thread cleans. The mask blocks these signals only on the thread running the handler, and
  // `timeout` sends its signal twice: a second thread would share the folder buffers. It waits
  // here until the first ends the process.
  if (g_handling.exchange(1)) {
    for (;;) ::pause();
  }
  for (int i = 0; i < kSlots; ++i) {
    int published = 2;
    if (!g_state[i].compare_exchange_strong(published, 3, std::memory_order_acq_rel)) continue;
    if (!g_folder[i]) {
      ::unlink(g_path[i]);
      continue;
    }
    const int fd = ::open(g_path[i], O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
    if (fd >= 0) {
      remove_folder_contents(fd, 0);
      ::close(fd);
    }
    ::rmdir(g_path[i]);
  }
  // End the process as the signal would have (the shell sees "killed by SIGINT"): the default
  // action back, and the signal raised again. It is blocked while this handler runs, so it is
  // delivered, and ends the process, as the handler returns.
  for (size_t k = 0; k < std::size(kSignals); ++k)
    if (kSignals[k] == sig) ::sigaction(sig, &g_previous[k], nullptr);
  ::raise(sig);
}

void install() {
  for (size_t k = 0; k < std::size(kSignals); ++k) {
    struct sigaction current {};
    if (::sigaction(kSignals[k], nullptr, &current) != 0) continue;
    // Ignored, or handled by the program: leave it be.
    if ((current.sa_flags & SA_SIGINFO) || current.sa_handler != SIG_DFL) continue;
    g_previous[k] = current;
    // All three blocked while the handler runs, and no SA_RESETHAND (which implies SA_NODEFER):
    // `timeout` sends its signal twice (to the process and to its group), and a second one
    // arriving mid-handler would end the process with the files not yet removed.
    struct sigaction sa {};
    sa.sa_handler = on_interrupt;
    sigemptyset(&sa.sa_mask);
    for (int other : kSignals) sigaddset(&sa.sa_mask, other);
    sa.sa_flags = 0;
    ::sigaction(kSignals[k], &sa, nullptr);
  }
}

}  // namespace

int remove_on_interrupt(const std::string& path, bool folder) {
  if (path.empty() || path.size() >= PATH_MAX) return -1;
  std::call_once(g_installed, install);
  for (int i = 0; i < kSlots; ++i) {
    int free_state = 0;
    if (!g_state[i].compare_exchange_strong(free_state, 1, std::memory_order_acq_rel)) continue;
    std::memcpy(g_path[i], path.c_str(), path.size() + 1);
    g_folder[i] = folder;
    g_state[i].store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void keep_after_interrupt(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  int published = 2;
  if (!g_state[slot].compare_exchange_strong(published, 1, std::memory_order_acq_rel)) return;  // being cleaned
  g_path[slot][0] = '\0';
  g_state[slot].store(0, std::memory_order_release);
}

}  // namespace sl
