// compare's live run: which child processes to start, in which order, and running them.
//
// Each policy runs in processes of its own, interleaved A B C A' A B C A' ... so that a drift of
// the machine (clocks, temperature, other tenants) lands on every policy alike; A' is the
// baseline measured a second time, whose difference from A is the noise. One traced process per
// policy comes last: tracing perturbs, so its timings never enter the latency figures.
#pragma once
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

namespace sl::compare {

struct LiveSpec {
  std::string exe;                       // the streamlab binary the children run
  std::string backend = "cuda";
  std::vector<std::string> model_args;   // model options every child gets (--config, --batch, ...)
  std::vector<std::string> policies;     // policies[0] is the baseline A; "serial" is the reference
  int repetitions = 5;
  bool baseline_twice = true;
  int steps = 20, warmup = 3;
  std::vector<std::string> modes{"eager", "graph"};
  bool trace = true;
  int traced_steps = 5;
  double child_timeout_s = 900;
  std::vector<std::pair<std::string, std::string>> env;  // set in every child (e.g. CUDA_DEVICE_MAX_CONNECTIONS)
};

struct PlannedRun {
  std::string side;     // the side it belongs to ("per-layer", "per-layer (again)", ...)
  std::string policy;
  int repetition = 0;   // 1-based; 0 for a traced run
  bool traced = false;
  std::string out;      // measurement JSON, relative to the run folder
  std::string log;      // its output, relative to the run folder
  std::vector<std::string> argv;
};

// A file-name-safe form of a side label: "pool:6 (again)" -> "pool6-again".
std::string file_slug(const std::string& label);

// The label of the baseline's second measurement.
std::string again_label(const std::string& baseline);

std::vector<PlannedRun> plan_live(const LiveSpec& spec);

// Runs every planned child into `folder` (which must hold runs/, traces/ and logs/), printing
// progress with an estimate of the time left to `progress`. Stops at the first child that fails
// (sl::Error with its log's tail) or on Ctrl-C (sl::Error "interrupted").
void execute_plan(const LiveSpec& spec, const std::vector<PlannedRun>& plan, const std::string& folder,
                  FILE* progress);

}  // namespace sl::compare
