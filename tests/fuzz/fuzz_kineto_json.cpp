// libFuzzer target: the Kineto / Chrome trace JSON loader (ours with the "streamlab" block, and
// PyTorch profiler traces), from memory.
//
// Each input is loaded by the precise loader (simdjson DOM) and by the fast loader with its
// default options and with small chunks on one and two threads (so that short inputs are cut
// into several chunks and parsed in parallel). Expected: all loads give the same trace (events,
// string table, metadata), or all throw sl::Error. Anything else (a crash, a sanitizer report,
// another exception, a disagreement) aborts.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/error.h"
#include "profiler/trace_io.h"
#include "tests/fuzz/fuzz_util.h"

using namespace sl::prof;

namespace {

JsonLoadOptions fast(unsigned threads, size_t chunk_bytes) {
  JsonLoadOptions o;
  o.threads = threads;
  o.chunk_bytes = chunk_bytes;
  return o;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const std::string origin = "'fuzz.json'";

  JsonLoadOptions precise;
  precise.fast = false;
  std::optional<Trace> ref;
  std::string ref_error;
  try {
    ref = load_kineto_json(text, origin, precise);
  } catch (const sl::Error& e) {
    ref_error = e.what();
  }

  // Default options (one chunk for inputs this small), then chunks of a few events or less.
  const JsonLoadOptions variants[] = {JsonLoadOptions{}, fast(1, 64), fast(2, 48), fast(2, 300)};
  for (const JsonLoadOptions& o : variants) {
    const std::string how = "fast loader (threads " + std::to_string(o.threads) + ", chunk_bytes " +
                            std::to_string(o.chunk_bytes) + ")";
    std::optional<Trace> t;
    std::string error;
    JsonLoadStats stats;
    try {
      t = load_kineto_json(text, origin, o, &stats);
    } catch (const sl::Error& e) {
      error = e.what();
    }
    if (ref && !t) sl::fuzz::broken(how + " refused what the precise loader read: " + error);
    if (!ref && t) sl::fuzz::broken(how + " read what the precise loader refused: " + ref_error);
    if (ref) {
      std::string d = first_difference_by_id(*ref, *t);
      if (!d.empty()) sl::fuzz::broken(how + " and the precise loader differ: " + d);
    }
  }
  return 0;
}
