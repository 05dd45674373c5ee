#include "core/interrupt_cleanup.h"

#include <limits.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>  // std::call_once

namespace sl {
namespace {

constexpr int kSlots = 64;
// A slot is written only while free (state 0), then published with state 2; the handler reads
// only published slots. State 1: being filled or emptied.
char g_path[kSlots][PATH_MAX];
std::atomic<int> g_state[kSlots];
constexpr int kSignals[] = {SIGINT, SIGTERM, SIGHUP};
struct sigaction g_previous[sizeof(kSignals) / sizeof(kSignals[0])];
std::once_flag g_installed;

void on_interrupt(int sig) {
  for (int i = 0; i < kSlots; ++i)
    if (g_state[i].load(std::memory_order_acquire) == 2) ::unlink(g_path[i]);
  // End the process as the signal would have (the shell sees "killed by SIGINT"): the default
  // action back, and the signal raised again. It is blocked while this handler runs, so it is
  // delivered, and ends the process, as the handler returns.
  for (size_t k = 0; k < sizeof(kSignals) / sizeof(kSignals[0]); ++k)
    if (kSignals[k] == sig) ::sigaction(sig, &g_previous[k], nullptr);
  ::raise(sig);
}

void install() {
  for (size_t k = 0; k < sizeof(kSignals) / sizeof(kSignals[0]); ++k) {
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

int remove_on_interrupt(const std::string& path) {
  if (path.empty() || path.size() >= PATH_MAX) return -1;
  std::call_once(g_installed, install);
  for (int i = 0; i < kSlots; ++i) {
    int free_state = 0;
    if (!g_state[i].compare_exchange_strong(free_state, 1, std::memory_order_acq_rel)) continue;
    std::memcpy(g_path[i], path.c_str(), path.size() + 1);
    g_state[i].store(2, std::memory_order_release);
    return i;
  }
  return -1;
}

void keep_after_interrupt(int slot) {
  if (slot < 0 || slot >= kSlots) return;
  g_state[slot].store(1, std::memory_order_release);
  g_path[slot][0] = '\0';
  g_state[slot].store(0, std::memory_order_release);
}

}  // namespace sl
