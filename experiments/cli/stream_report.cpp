#include "experiments/cli/stream_report.h"

#include <nlohmann/json.hpp>

namespace sl::cli {

void print_stream_plan(std::FILE* out, const StreamPlan& plan, const StreamPolicy& policy, int alias_from,
                       bool every_stream) {
  const size_t se = plan.shared_expert >= 0 ? 1 : 0;
  std::fprintf(out, "streams requested: %zu (%zu aux%s); CUDA streams created: %zu (source %s)\n",
               plan.streams.size(), plan.streams.size() - se, se ? " + shared_expert" : "", plan.physical.size(),
               stream_source_name(policy.source));
  const bool one_to_one = policy.source == StreamSource::Cuda;
  for (const auto& s : plan.streams) {
    if (!every_stream) break;
    if (one_to_one)
      std::fprintf(out, "  %-16s owner %s\n", s.name.c_str(), s.owner.c_str());
    else
      std::fprintf(out, "  %-16s owner %-12s -> %s\n", s.name.c_str(), s.owner.c_str(),
                   plan.physical[size_t(s.physical)].name.c_str());
  }
  const auto aliased = plan.aliased();
  if (!aliased.empty()) {
    std::fprintf(out, "aliasing: %zu CUDA streams serve more than one request (the pool has %d)\n", aliased.size(),
                 StreamPolicy::kTorchPoolSize);
    for (int k : aliased)
      std::fprintf(out, "  %s = %s\n", plan.physical[size_t(k)].name.c_str(), plan.served(k).c_str());
  } else if (policy.source == StreamSource::Torch) {
    std::fprintf(out, "aliasing: none (%zu draws of the pool's %d)\n", plan.streams.size(),
                 StreamPolicy::kTorchPoolSize);
  }
  if (policy.source == StreamSource::Torch) {
    if (alias_from >= 0)
      std::fprintf(out, "with this policy and config, draws alias from %d MTP layers on\n", alias_from);
    else
      std::fprintf(out, "with this policy and config, draws never alias (checked up to 256 MTP layers)\n");
  }
}

nlohmann::json stream_plan_json(const StreamPlan& plan, const StreamPolicy& policy, int alias_from) {
  nlohmann::json j;
  j["source"] = stream_source_name(policy.source);
  j["requested"] = plan.streams.size();
  j["created"] = plan.physical.size();
  j["streams"] = nlohmann::json::array();
  for (const auto& s : plan.streams)
    j["streams"].push_back({{"name", s.name}, {"owner", s.owner}, {"physical", plan.physical[size_t(s.physical)].name}});
  j["aliased"] = nlohmann::json::array();
  for (int k : plan.aliased())
    j["aliased"].push_back({{"physical", plan.physical[size_t(k)].name}, {"serves", plan.served(k)}});
  j["aliasing_from_mtp_layers"] = alias_from >= 0 ? nlohmann::json(alias_from) : nlohmann::json(nullptr);
  return j;
}

}  // namespace sl::cli
