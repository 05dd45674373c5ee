// libFuzzer target: the SQLite trace loader (our Nsight Systems export layout, and nsys's own
// exports as far as its tables go). load_nsys_sqlite takes a path: each input is written to a
// scratch file first. Expected: a finalized trace or sl::Error; anything else aborts.
#include <cstdint>

#include "core/error.h"
#include "profiler/nsys_sqlite.h"
#include "tests/fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static sl::fuzz::ScratchFile file("trace.sqlite");
  const std::string& path = file.write(data, size);
  try {
    sl::prof::Trace t = sl::prof::load_nsys_sqlite(path);
    (void)t.event_count();
  } catch (const sl::Error&) {
  }
  return 0;
}
