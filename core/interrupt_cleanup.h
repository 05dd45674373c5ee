// Temporary files that must not outlive a Ctrl-C: a killed process runs no destructors, so a
// trace's unpacked copy in /tmp (as large as the trace), a half-written ".NAME.tmp.*" beside an
// export or a staging folder of CSV tables would stay behind. A file (or folder) registered here
// is removed by a SIGINT / SIGTERM / SIGHUP handler, which then lets the signal end the process as
// it would have.
//
// The handler is installed only for signals whose disposition is still the default: a program
// that handles them itself (compare and sweep wait for their children and report the interruption)
// keeps its handler, and its destructors do the cleaning. Best effort: at most kSlots files at once
// (a further one is simply not registered), paths up to PATH_MAX.
#pragma once
#include <string>

namespace sl {

// Registers `path` for removal on an interrupting signal; a `folder` goes with what it holds (a
// staging folder of tables being written). Returns a slot to pass to keep_after_interrupt (-1
// when none was free; harmless to pass back).
int remove_on_interrupt(const std::string& path, bool folder = false);
// Unregisters: the file was renamed into place or removed by its owner.
void keep_after_interrupt(int slot);

// RAII form for the owners of temporary files.
class InterruptCleanup {
 public:
  InterruptCleanup() = default;
  explicit InterruptCleanup(const std::string& path, bool folder = false) : slot_(remove_on_interrupt(path, folder)) {}
  ~InterruptCleanup() { release(); }
  InterruptCleanup(const InterruptCleanup&) = delete;
  InterruptCleanup& operator=(const InterruptCleanup&) = delete;
  void reset(const std::string& path, bool folder = false) {
    release();
    slot_ = remove_on_interrupt(path, folder);
  }
  void release() {
    keep_after_interrupt(slot_);
    slot_ = -1;
  }

 private:
  int slot_ = -1;
};

}  // namespace sl
