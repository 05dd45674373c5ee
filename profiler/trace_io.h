// Loading traces back into the trace model: our Kineto-style JSON (lossless: it carries a
// "streamlab" block), PyTorch profiler (Kineto) JSON, and our Nsight-layout SQLite. The format is
// detected from the content, not the file name.
//
// Malformed input never crashes: it raises sl::Error naming the file, the byte offset (JSON
// syntax) or the event index / table row, and what was expected.
//
// JSON is read by a fast loader (simdjson On-Demand over chunks of "traceEvents", parsed on
// several threads and merged in file order) that hands anything unusual, malformed input
// included, to the precise loader (simdjson DOM over the whole document), which names the
// error. Both give the same trace (same events, same string table).
#pragma once
#include <cstddef>
#include <string>
#include <string_view>

#include "profiler/trace.h"

namespace sl::prof {

enum class TraceFormat { Unknown, StreamlabJson, KinetoJson, Sqlite };
const char* to_string(TraceFormat f);

// Looks at the first bytes (and for JSON whether a "streamlab" block is present). Throws
// sl::Error when the file cannot be read.
TraceFormat detect_trace_format(const std::string& path);

// Any supported format. The result is finalized.
Trace load_trace(const std::string& path);

struct JsonLoadOptions {
  bool fast = true;        // false: the precise loader alone
  unsigned threads = 0;    // fast loader threads; 0: one per core, at most 16
  size_t chunk_bytes = 0;  // bytes of "traceEvents" per chunk (about); 0: 1 MiB
};

// Where a JSON load spent its time. The fast loader's threads read and parse at once: read_s /
// events_s are sums over its threads, parallel_s the wall time of that part; merge_s, place_s,
// frame_s and finalize_s follow it (wall times).
struct JsonLoadStats {
  bool fast = false;          // the fast loader produced the trace
  std::string fallback;       // why the precise loader ran instead ("" when it did not)
  unsigned threads = 0;       // fast loader threads used
  size_t chunks = 0;          // chunks of "traceEvents" parsed (fast loader)
  size_t retries = 0;         // fast loader passes redone after a wrong guess about the tail
  size_t bytes = 0;           // JSON bytes
  size_t json_events = 0;     // elements of "traceEvents"
  double read_s = 0;          // reading the file (or copying the text) into parse buffers
  double dom_s = 0;           // precise loader: simdjson DOM parse of the whole document
  double events_s = 0;        // event fields into trace records (fast loader: JSON parse included)
  double merge_s = 0;         // fast loader: the pass in file order over the chunks (names interned, places given)
  double place_s = 0;         // fast loader: the chunks' records copied into the trace (all threads)
  double parallel_s = 0;      // fast loader: wall time of the threaded read / parse
  double frame_s = 0;         // everything outside "traceEvents" (top level, deviceProperties, block), serial part
  double frame_early_s = 0;   // fast loader: the same read by one thread while the others parsed (in parallel_s)
  double finalize_s = 0;      // Trace::finalize
  double wall_s = 0;          // the whole load
};

// JSON text (ours or PyTorch's); `origin` names the source in error messages.
Trace load_kineto_json(std::string_view text, const std::string& origin);
Trace load_kineto_json(std::string_view text, const std::string& origin, const JsonLoadOptions& opts,
                       JsonLoadStats* stats = nullptr);
Trace load_kineto_json_file(const std::string& path);
Trace load_kineto_json_file(const std::string& path, const JsonLoadOptions& opts, JsonLoadStats* stats = nullptr);

}  // namespace sl::prof
