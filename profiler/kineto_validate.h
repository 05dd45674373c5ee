// A strict validator of the Kineto-style JSON rules of docs/traces.md 3.9, used by tests on
// streamlab's own output (and usable on any Kineto trace):
// - top level: schemaVersion (int), deviceProperties (array), distributedInfo {"rank": int}
//   written so HTA's rank regex (`"rank":\s+\d+`) finds it, baseTimeNanoseconds (int),
//   displayTimeUnit (string), traceEvents (array);
// - units: every "ts" / "dur" written as microseconds with exactly three decimals, relative to
//   baseTimeNanoseconds (a ts beyond ~115 days means absolute time was written), dur >= 0;
// - slices (ph X): known cat, non-empty name, integer pid / tid; GPU ops carry Kineto's args
//   (stream, correlation, device, context; kernels grid, block, registers per thread, shared
//   memory; memcpy / memset bytes and memory bandwidth (GB/s)), pid == args.device and the
//   track's stream == args.stream; runtime / driver names carry no _vNNNN suffix;
// - nesting: slices on one (pid, tid) nest (contained or disjoint);
// - cuda_sync slices are on tracks of their own (no kernel on the same track);
// - flows: ph s / f with cat and name "ac2g", ids unique, each s paired with exactly one f with
//   "bp": "e"; s lies inside a runtime / driver slice of its track, f at the start of a GPU op
//   slice of its track;
// - counters: ph C with numeric args;
// - metadata: a process_name for every pid with slices and a thread_name for every GPU track,
//   GPU track names starting "stream ".
#pragma once
#include <string>
#include <string_view>
#include <vector>

namespace sl::prof {

struct KinetoValidation {
  std::vector<std::string> errors;  // empty = valid (capped at max_errors, then "... more")
  size_t events = 0, slices = 0, flows = 0, counters = 0, metadata = 0;
  bool ok() const { return errors.empty(); }
  std::string report() const;       // one error per line, or "valid: N events ..."
};

KinetoValidation validate_kineto_json(std::string_view text, size_t max_errors = 50);
// Throws sl::Error when the file cannot be read.
KinetoValidation validate_kineto_file(const std::string& path, size_t max_errors = 50);

}  // namespace sl::prof
