#include "model/stream_policy.h"

#include <algorithm>
#include <cstdio>
#include <string>

#include "core/error.h"

namespace sl {

const char* stream_source_name(StreamSource s) { return s == StreamSource::Torch ? "torch" : "cuda"; }

StreamSource parse_stream_source(const std::string& text) {
  if (text == "cuda") return StreamSource::Cuda;
  if (text == "torch") return StreamSource::Torch;
  fail("unknown stream source '", text, "' (expected cuda: each stream created as a C++ engine does, or torch: ",
       "drawn from PyTorch's per-priority pool of ", StreamPolicy::kTorchPoolSize, ")");
}

const char* placement_name(Placement p) { return p == Placement::VllmHead ? "vllm-head" : "vllm-fix"; }

Placement parse_placement(const std::string& text) {
  if (text == "vllm-fix") return Placement::VllmFix;
  if (text == "vllm-head") return Placement::VllmHead;
  fail("unknown placement '", text, "' (expected vllm-fix or vllm-head)");
}

StreamPolicy StreamPolicy::parse(const std::string& text) {
  StreamPolicy p;
  if (text == "serial") p.kind = PolicyKind::Serial;
  else if (text == "per-layer") p.kind = PolicyKind::PerLayer;
  else if (text == "shared") p.kind = PolicyKind::Shared;
  else if (text == "global") p.kind = PolicyKind::Global;
  else if (text == "per-layer-all") p.kind = PolicyKind::PerLayerAll;
  else if (text == "trtllm-per-layer") p.kind = PolicyKind::TrtllmPerLayer;
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
    fail("unknown stream policy '", text,
         "' (expected serial, per-layer, shared, global, per-layer-all, trtllm-per-layer or pool:K)");
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
    case PolicyKind::TrtllmPerLayer: return "trtllm-per-layer";
    case PolicyKind::Pool: return "pool:" + std::to_string(pool_size);
  }
  return "?";
}

namespace {

// Appends three requests "<prefix>.aux0..2" owned by `owner`; returns the index of the first.
int add_triple(StreamPlan& plan, const std::string& prefix, const std::string& owner) {
  int first = int(plan.streams.size());
  for (int r = 0; r < 3; ++r) plan.streams.push_back({prefix + ".aux" + std::to_string(r), owner});
  return first;
}

// Gives every request a physical stream, as the source does.
void place_requests(StreamPlan& plan, const StreamPolicy& p) {
  if (p.source == StreamSource::Cuda) {
    for (size_t i = 0; i < plan.streams.size(); ++i) {
      plan.physical.push_back({plan.streams[i].name, plan.streams[i].owner, false, {int(i)}});
      plan.streams[i].physical = int(i);
    }
    return;
  }
  // torch.cuda.Stream(): the first draw creates the whole pool of this priority (every request
  // of a model has the same priority); then draw i gets pool stream i mod 32.
  if (plan.streams.empty()) return;
  const int n = StreamPolicy::kTorchPoolSize;
  for (int k = 0; k < n; ++k) {
    char name[48];
    std::snprintf(name, sizeof name, "torch.pool.p%d.%02d", p.aux_priority, k);
    plan.physical.push_back({name, "torch", true, {}});
  }
  for (size_t i = 0; i < plan.streams.size(); ++i) {
    const int k = int(i % size_t(n));
    plan.streams[i].physical = k;
    plan.physical[size_t(k)].requests.push_back(int(i));
  }
}

}  // namespace

// Request order follows the owners' construction order in the code being compared: the target
// model's streams first (asked for in its constructor, or by each layer under per-layer-all and
// trtllm-per-layer), then the MTP predictor's (once, under `shared`) or each MTP layer's (under
// `per-layer`); the MoE's process-global shared-expert stream comes in between (see below).
StreamPlan StreamPlan::make(const StreamPolicy& p, const ModelConfig& c) {
  const int L = c.num_hidden_layers, N = c.num_nextn_predict_layers;
  StreamPlan plan;
  plan.roles.assign(size_t(L + N), {-1, -1, -1});
  auto assign_triple = [&](int layer, int first) { plan.roles[size_t(layer)] = {first, first + 1, first + 2}; };
  auto mtp_prefix = [](int i) { return "mtp" + std::to_string(i); };
  auto mtp_owner = [](int i) { return "mtp.layer" + std::to_string(i); };
  switch (p.kind) {
    case PolicyKind::Serial:
      break;
    case PolicyKind::PerLayer: {
      int t = add_triple(plan, "target", "target");
      for (int l = 0; l < L; ++l) assign_triple(l, t);
      for (int i = 0; i < N; ++i) assign_triple(L + i, add_triple(plan, mtp_prefix(i), mtp_owner(i)));
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
      for (int i = 0; i < N; ++i) assign_triple(L + i, add_triple(plan, mtp_prefix(i), mtp_owner(i)));
      break;
    }
    case PolicyKind::TrtllmPerLayer: {
      // TensorRT-LLM before its fix: each compress-4 layer made its own three streams (indexer,
      // indexer aux, compressor roles); every other layer runs its aux work on the current stream.
      for (int l = 0; l < L + N; ++l) {
        if (c.layer_type(l) != LayerType::C4A) continue;
        const bool mtp = l >= L;
        assign_triple(l, add_triple(plan, mtp ? mtp_prefix(l - L) : "L" + std::to_string(l),
                                    mtp ? mtp_owner(l - L) : "L" + std::to_string(l)));
      }
      break;
    }
    case PolicyKind::Pool: {
      for (int k = 0; k < p.pool_size; ++k) plan.streams.push_back({"pool.aux" + std::to_string(k), "model"});
      // Roles round-robin over the pool in layer order, so that K = 3 equals `global` and
      // K = 1 puts every aux role of every layer on one stream.
      for (int l = 0; l < L + N; ++l)
        for (int r = 0; r < 3; ++r) plan.roles[size_t(l)][size_t(r)] = (3 * l + r) % p.pool_size;
      break;
    }
  }
  if (p.shared_expert_stream && p.kind != PolicyKind::Serial) {
    // vLLM's process-global shared-experts stream is asked for while the first MoE layer is
    // built: after the target model's own streams (or layer 0's), before the MTP drafter's.
    // The order matters under the torch source, where it decides which draws alias.
    int at = 0;
    switch (p.kind) {
      case PolicyKind::Pool: at = p.pool_size; break;
      case PolicyKind::TrtllmPerLayer: at = c.layer_type(0) == LayerType::C4A ? 3 : 0; break;
      default: at = std::min<int>(3, int(plan.streams.size())); break;
    }
    plan.streams.insert(plan.streams.begin() + at, {"shared_expert", "process"});
    for (auto& r : plan.roles)
      for (int& i : r)
        if (i >= at) ++i;
    plan.shared_expert = at;
  }
  place_requests(plan, p);
  return plan;
}

std::vector<int> StreamPlan::aliased() const {
  std::vector<int> out;
  for (size_t k = 0; k < physical.size(); ++k)
    if (physical[k].requests.size() > 1) out.push_back(int(k));
  return out;
}

std::string StreamPlan::served(int k) const {
  std::string s;
  for (int r : physical[size_t(k)].requests) s += (s.empty() ? "" : " + ") + streams[size_t(r)].name;
  return s.empty() ? "(none drawn)" : s;
}

std::string StreamPlan::label(int k) const {
  const Physical& ph = physical[size_t(k)];
  return ph.pool && !ph.requests.empty() ? ph.name + " = " + served(k) : ph.name;
}

int first_aliasing_mtp_layers(const StreamPolicy& p, const ModelConfig& c, int limit) {
  ModelConfig m = c;
  for (int n = 0; n <= limit; ++n) {
    m.num_nextn_predict_layers = n;
    if (!StreamPlan::make(p, m).aliased().empty()) return n;
  }
  return -1;
}

}  // namespace sl
