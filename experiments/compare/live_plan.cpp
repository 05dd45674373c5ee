#include "experiments/compare/live_plan.h"

#include <algorithm>
#include <cctype>
#include <chrono>

#include "core/error.h"
#include "experiments/compare/child_process.h"

namespace sl::compare {

// A file-name-safe form of a side label: "pool:6 (again)" -> "pool6-again".
std::string file_slug(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_') out += c;
    else if (c == ' ' && !out.empty() && out.back() != '-') out += '-';
  }
  while (!out.empty() && out.back() == '-') out.pop_back();
  return out;
}

std::string again_label(const std::string& baseline) { return baseline + " (again)"; }

namespace {


std::vector<std::string> child_argv(const LiveSpec& s, const PlannedRun& r, const std::string& folder) {
  std::vector<std::string> a{s.exe, "measure", "--backend", s.backend, "--policy", r.policy};
  a.insert(a.end(), s.model_args.begin(), s.model_args.end());
  std::string modes;
  for (const auto& m : s.modes) modes += (modes.empty() ? "" : ",") + m;
  a.insert(a.end(), {"--modes", modes, "--warmup", std::to_string(s.warmup), "--steps",
                     std::to_string(r.traced ? s.traced_steps : s.steps), "--out", folder + "/" + r.out});
  if (r.traced) a.push_back("--trace");
  return a;
}


}  // namespace

std::vector<PlannedRun> plan_live(const LiveSpec& spec) {
  SL_CHECK(spec.policies.size() >= 2, "compare: needs at least two policies, got ", spec.policies.size());
  for (size_t i = 0; i < spec.policies.size(); ++i)
    for (size_t j = i + 1; j < spec.policies.size(); ++j)
      SL_CHECK(spec.policies[i] != spec.policies[j], "compare: policy '", spec.policies[i], "' is listed twice");
  SL_CHECK(spec.repetitions >= 1 && spec.repetitions <= 1000, "compare: --repetitions must be in [1, 1000], not ",
           spec.repetitions);
  std::vector<std::string> sides = spec.policies;
  if (spec.baseline_twice) sides.push_back(again_label(spec.policies[0]));
  std::vector<PlannedRun> plan;
  for (int rep = 1; rep <= spec.repetitions; ++rep)
    for (const auto& side : sides) {
      PlannedRun r;
      r.side = side;
      r.policy = side == sides.back() && spec.baseline_twice ? spec.policies[0] : side;
      r.repetition = rep;
      const std::string base = file_slug(side) + "_r" + std::to_string(rep);
      r.out = "runs/" + base + ".json";
      r.log = "logs/" + base + ".log";
      plan.push_back(r);
    }
  if (spec.trace)
    for (const auto& p : spec.policies) {
      PlannedRun r;
      r.side = p;
      r.policy = p;
      r.traced = true;
      r.out = "traces/" + file_slug(p) + ".json";
      r.log = "logs/" + file_slug(p) + "_traced.log";
      plan.push_back(r);
    }
  return plan;
}

void execute_plan(const LiveSpec& spec, const std::vector<PlannedRun>& plan, const std::string& folder,
                  FILE* progress) {
  install_interrupt_handlers();
  const auto t0 = std::chrono::steady_clock::now();
  double done_seconds = 0;
  for (size_t i = 0; i < plan.size(); ++i) {
    const PlannedRun& r = plan[i];
    if (progress) {
      std::string eta = "estimating";
      if (i > 0) eta = "about " + clock_text(done_seconds / double(i) * double(plan.size() - i)) + " left";
      std::fprintf(progress, "[%zu/%zu] %s%s, %s (%s)\n", i + 1, plan.size(), r.side.c_str(),
                   r.traced ? ", traced" : "", r.traced ? "structure" : ("repetition " + std::to_string(r.repetition)).c_str(),
                   eta.c_str());
      std::fflush(progress);
    }
    const ChildResult res = run_child(child_argv(spec, r, folder), folder + "/" + r.log, spec.child_timeout_s, spec.env);
    done_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (res.interrupted) fail("compare: interrupted (", i, " of ", plan.size(), " runs done); nothing was written");
    if (!res.ok())
      fail("compare: the run of ", r.side, r.traced ? " (traced)" : "", " failed (", res.describe(),
           "); the last lines of its output:\n", tail_of(folder + "/" + r.log));
  }
  if (progress)
    std::fprintf(progress, "all %zu runs done in %s\n", plan.size(), clock_text(done_seconds).c_str());
}

}  // namespace sl::compare
