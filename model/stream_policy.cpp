#include "model/stream_policy.h"

#include <string>

#include "core/error.h"

namespace sl {

StreamPolicy StreamPolicy::parse(const std::string& text) {
  StreamPolicy p;
  if (text == "serial") p.kind = PolicyKind::Serial;
  else if (text == "per-layer") p.kind = PolicyKind::PerLayer;
  else if (text == "shared") p.kind = PolicyKind::Shared;
  else if (text == "global") p.kind = PolicyKind::Global;
  else if (text == "per-layer-all") p.kind = PolicyKind::PerLayerAll;
  else if (text.rfind("pool:", 0) == 0) {
    p.kind = PolicyKind::Pool;
    const std::string k = text.substr(5);
    size_t used = 0;
    int v = 0;
    try {
      v = std::stoi(k, &used);
    } catch (...) {
      used = 0;
    }
    SL_CHECK(used == k.size() && !k.empty() && v >= 1 && v <= 1024, "stream policy '", text,
             "': pool:K needs a whole number K in [1, 1024]");
    p.pool_size = v;
  } else {
    fail("unknown stream policy '", text, "' (expected serial, per-layer, shared, global, per-layer-all or pool:K)");
  }
  if (p.kind == PolicyKind::Serial) p.shared_expert_stream = false;
  return p;
}

std::string StreamPolicy::str() const {
  switch (kind) {
    case PolicyKind::Serial: return "serial";
    case PolicyKind::PerLayer: return "per-layer";
    case PolicyKind::Shared: return "shared";
    case PolicyKind::Global: return "global";
    case PolicyKind::PerLayerAll: return "per-layer-all";
    case PolicyKind::Pool: return "pool:" + std::to_string(pool_size);
  }
  return "?";
}

namespace {

// Appends three streams "<prefix>.aux0..2" owned by `owner`; returns the index of the first.
int add_triple(StreamPlan& plan, const std::string& prefix, const std::string& owner) {
  int first = int(plan.streams.size());
  for (int r = 0; r < 3; ++r) plan.streams.push_back({prefix + ".aux" + std::to_string(r), owner});
  return first;
}

}  // namespace

// Creation order follows the owners' construction order in the code being compared: the target
// model's streams first (created in its constructor, or by each layer under per-layer-all), then
// the MTP predictor's (once, under `shared`) or each MTP layer's (under `per-layer`).
StreamPlan StreamPlan::make(const StreamPolicy& p, int L, int N) {
  StreamPlan plan;
  plan.roles.assign(size_t(L + N), {-1, -1, -1});
  auto assign_triple = [&](int layer, int first) { plan.roles[layer] = {first, first + 1, first + 2}; };
  switch (p.kind) {
    case PolicyKind::Serial:
      break;
    case PolicyKind::PerLayer: {
      int t = add_triple(plan, "target", "target");
      for (int l = 0; l < L; ++l) assign_triple(l, t);
      for (int i = 0; i < N; ++i) assign_triple(L + i, add_triple(plan, "mtp" + std::to_string(i), "mtp.layer" + std::to_string(i)));
      break;
    }
    case PolicyKind::Shared: {
      int t = add_triple(plan, "target", "target");
      for (int l = 0; l < L; ++l) assign_triple(l, t);
      if (N > 0) {
        int m = add_triple(plan, "mtp", "mtp");
        for (int i = 0; i < N; ++i) assign_triple(L + i, m);
      }
      break;
    }
    case PolicyKind::Global: {
      int g = add_triple(plan, "global", "model");
      for (int l = 0; l < L + N; ++l) assign_triple(l, g);
      break;
    }
    case PolicyKind::PerLayerAll: {
      for (int l = 0; l < L; ++l) assign_triple(l, add_triple(plan, "L" + std::to_string(l), "L" + std::to_string(l)));
      for (int i = 0; i < N; ++i)
        assign_triple(L + i, add_triple(plan, "mtp" + std::to_string(i), "mtp.layer" + std::to_string(i)));
      break;
    }
    case PolicyKind::Pool: {
      for (int k = 0; k < p.pool_size; ++k) plan.streams.push_back({"pool.aux" + std::to_string(k), "model"});
      // Roles round-robin over the pool in layer order, so that K = 3 equals `global` and
      // K = 1 puts every aux role of every layer on one stream.
      for (int l = 0; l < L + N; ++l)
        for (int r = 0; r < 3; ++r) plan.roles[l][r] = (3 * l + r) % p.pool_size;
      break;
    }
  }
  if (p.shared_expert_stream && p.kind != PolicyKind::Serial) {
    plan.shared_expert = int(plan.streams.size());
    plan.streams.push_back({"shared_expert", "process"});
  }
  return plan;
}

}  // namespace sl
