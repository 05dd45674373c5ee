// Trace JSON loading, per phase, on one file: the rate the loader reaches (events of the trace
// model per second and MB/s of JSON, target >= 5M events/s) and where the time goes.
//
//   bench_trace_load FILE [--reps N] [--threads N] [--chunk-bytes N] [--precise] [--check]
//   bench_trace_load --write-synthetic EVENTS FILE    our layout (with the "streamlab" block)
//   bench_trace_load --write-pytorch EVENTS FILE      PyTorch profiler layout (no block)
//
// --precise times the precise (DOM) loader alone; --check also loads with it and requires the
// same trace. After the loads, a "memory:" line gives the peak RSS against the trace model's
// bytes and the file's (the check's load comes after it). Each repetition prints one line; the last line is the median
// ("median: load_s=... events_per_s=... mb_per_s=..."), which bench_trace_load.sh reads.
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "profiler/kineto_json.h"
#include "profiler/synthetic.h"
#include "profiler/trace_io.h"

using namespace sl::prof;

namespace {

int usage() {
  std::fprintf(stderr,
               "usage: bench_trace_load FILE [--reps N] [--threads N] [--chunk-bytes N] [--precise] [--check]\n"
               "       bench_trace_load --write-synthetic EVENTS FILE | --write-pytorch EVENTS FILE\n");
  return 2;
}

int write_file(const char* kind, size_t events, const std::string& path) {
  SyntheticOptions o;
  o.target_events = events;
  Trace t = make_synthetic_trace(o);
  if (std::strcmp(kind, "--write-synthetic") == 0) write_kineto_json_file(t, path);
  else write_pytorch_profiler_json_file(t, path);
  std::printf("wrote %s: %zu events of the trace model\n", path.c_str(), t.event_count());
  return 0;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

void print_phases(const JsonLoadStats& s, size_t events) {
  auto rate = [&](double sec) { return sec > 0 ? double(events) / sec / 1e6 : 0.0; };
  auto mbs = [&](double sec) { return sec > 0 ? double(s.bytes) / sec / 1e6 : 0.0; };
  std::printf("  %-44s %8.3f s %9.2f M ev/s %9.0f MB/s\n", "read (sum over threads)", s.read_s, rate(s.read_s), mbs(s.read_s));
  if (s.dom_s > 0)
    std::printf("  %-44s %8.3f s %9.2f M ev/s %9.0f MB/s\n", "simdjson DOM parse", s.dom_s, rate(s.dom_s), mbs(s.dom_s));
  std::printf("  %-44s %8.3f s %9.2f M ev/s %9.0f MB/s\n",
              s.fast ? "parse + event fields (sum over threads)" : "event fields", s.events_s, rate(s.events_s),
              mbs(s.events_s));
  if (s.fast) {
    std::printf("  %-44s %8.3f s %9.2f M ev/s %9.0f MB/s\n", "threaded read + parse (wall)", s.parallel_s,
                rate(s.parallel_s), mbs(s.parallel_s));
    if (s.frame_early_s > 0)
      std::printf("  %-44s %8.3f s\n", "  of it: top level + block on one thread", s.frame_early_s);
    std::printf("  %-44s %8.3f s %9.2f M ev/s\n", "merge: pass in file order (serial)", s.merge_s, rate(s.merge_s));
    std::printf("  %-44s %8.3f s %9.2f M ev/s\n", "merge: records placed (all threads)", s.place_s, rate(s.place_s));
  }
  std::printf("  %-44s %8.3f s\n", "top level + deviceProperties + block (serial)", s.frame_s);
  std::printf("  %-44s %8.3f s %9.2f M ev/s\n", "Trace::finalize", s.finalize_s, rate(s.finalize_s));
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  try {
    if (std::strncmp(argv[1], "--write-", 8) == 0) {
      if (argc != 4) return usage();
      return write_file(argv[1], size_t(std::strtoull(argv[2], nullptr, 10)), argv[3]);
    }
    std::string path = argv[1];
    int reps = 3;
    bool check = false;
    JsonLoadOptions opts;
    for (int i = 2; i < argc; ++i) {
      std::string a = argv[i];
      auto next = [&]() -> const char* { return i + 1 < argc ? argv[++i] : nullptr; };
      if (a == "--reps" && i + 1 < argc) reps = std::atoi(next());
      else if (a == "--threads" && i + 1 < argc) opts.threads = unsigned(std::atoi(next()));
      else if (a == "--chunk-bytes" && i + 1 < argc) opts.chunk_bytes = size_t(std::strtoull(next(), nullptr, 10));
      else if (a == "--precise") opts.fast = false;
      else if (a == "--check") check = true;
      else return usage();
    }
    std::vector<double> secs;
    size_t events = 0, bytes = 0;
    Trace last;
    for (int r = 0; r < reps; ++r) {
      JsonLoadStats s;
      Trace t = load_kineto_json_file(path, opts, &s);
      events = t.event_count();
      bytes = s.bytes ? s.bytes : bytes;
      secs.push_back(s.wall_s);
      std::printf("rep %d: %s loader%s, %zu events, %zu JSON events, %.1f MB, %u threads, %zu chunks: %.3f s = %.2f M "
                  "ev/s, %.0f MB/s\n",
                  r, s.fast ? "fast" : "precise", s.fallback.empty() ? "" : (" (fallback: " + s.fallback + ")").c_str(),
                  events, s.json_events, double(s.bytes) / 1e6, s.threads, s.chunks, s.wall_s,
                  double(events) / s.wall_s / 1e6, double(s.bytes) / s.wall_s / 1e6);
      print_phases(s, events);
      if (r + 1 == reps) last = std::move(t);
    }
    {
      // Peak memory of the loads against the trace model they built and the file: the loader's
      // own overhead is peak - model (the process's baseline is a few MB).
      struct rusage ru {};
      ::getrusage(RUSAGE_SELF, &ru);
      const double peak_mb = double(ru.ru_maxrss) / 1024.0, model_mb = double(last.bytes_held()) / 1e6 * 1e6 / 1048576.0,
                   file_mb = double(bytes) / 1048576.0;
      std::printf("memory: peak_rss_mib=%.0f model_mib=%.0f file_mib=%.0f peak_over_model=%.2f peak_over_file=%.2f "
                  "overhead_mib=%.0f\n",
                  peak_mb, model_mb, file_mb, peak_mb / model_mb, peak_mb / file_mb, peak_mb - model_mb);
    }
    if (check) {
      JsonLoadOptions precise;
      precise.fast = false;
      Trace ref = load_kineto_json_file(path, precise);
      std::string d = first_difference(ref, last);
      bool same_strings = ref.strings.size() == last.strings.size();
      for (size_t i = 0; same_strings && i < ref.strings.size(); ++i)
        same_strings = ref.strings.str(StrId(i)) == last.strings.str(StrId(i));
      std::printf("check against the precise loader: %s\n",
                  d.empty() && same_strings ? "same trace" : (d.empty() ? "string tables differ" : d).c_str());
      if (!d.empty() || !same_strings) return 1;
    }
    double m = median(secs);
    std::printf("median: load_s=%.4f events_per_s=%.0f mb_per_s=%.1f target_events_per_s=5000000 ratio_to_target=%.2f\n",
                m, double(events) / m, double(bytes) / m / 1e6, double(events) / m / 5e6);
    return 0;
  } catch (const sl::Error& e) {
    std::fprintf(stderr, "error: %s\n", e.what());
    return 1;
  }
}
