#include "ui/alignment.h"

#include <algorithm>

#include "core/error.h"
#include "profiler/kernel_roles.h"

namespace sl::ui {

AlignSpec parse_align(const std::string& spec) {
  const size_t colon = spec.rfind(':');
  const std::string index = colon == std::string::npos ? "" : spec.substr(colon + 1);
  const bool digits = !index.empty() && index.size() <= 9 &&
                      std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; });
  AlignSpec s;
  // A name may hold "::" (C++ scopes in range names): only a trailing ":<digits>" is an index.
  s.name = digits ? spec.substr(0, colon) : spec;
  if (s.name.empty()) throw Error("--align '" + spec + "': expected NAME or NAME:INDEX (an NVTX range name)");
  if (colon != std::string::npos && !digits && spec.find("::") == std::string::npos)
    throw Error("--align '" + spec + "': INDEX must be a non-negative integer (0 is the first instance)");
  if (digits) s.index = size_t(std::stoul(index));
  return s;
}

std::vector<prof::Ns> range_starts(const prof::Trace& t, const std::string& name) {
  const bool numbered = prof::strip_instance_number(name) != name;
  std::vector<prof::Ns> starts;
  for (const auto& r : t.nvtx) {
    if (r.kind == prof::NvtxKind::Mark) continue;
    const std::string& n = t.str(r.name);
    if (n == name || (!numbered && prof::strip_instance_number(n) == name)) starts.push_back(r.start);
  }
  std::sort(starts.begin(), starts.end());
  return starts;
}

std::optional<AlignSpec> default_alignment(const prof::Trace& a, const prof::Trace& b) {
  for (const char* name : {"decode", "ProfilerStep"})
    if (!range_starts(a, name).empty() && !range_starts(b, name).empty()) return AlignSpec{name, 0};
  return std::nullopt;
}

prof::Ns alignment_point(const prof::Trace& t, const std::string& source, const AlignSpec& spec) {
  const std::vector<prof::Ns> starts = range_starts(t, spec.name);
  if (starts.empty()) throw Error("--align " + to_string(spec) + ": " + source + " has no NVTX range '" + spec.name + "'");
  if (spec.index >= starts.size())
    throw Error("--align " + to_string(spec) + ": " + source + " has " + std::to_string(starts.size()) + " '" +
                spec.name + "' range" + (starts.size() == 1 ? "" : "s") + " (INDEX 0.." +
                std::to_string(starts.size() - 1) + ")");
  return starts[spec.index];
}

std::string to_string(const AlignSpec& spec) { return spec.name + ":" + std::to_string(spec.index); }

}  // namespace sl::ui
