// How `schedule` and `run` list a model's streams: each requested stream with the CUDA stream it
// runs on, and, when the torch source hands one CUDA stream to several requests, which roles of
// which layers share it and from which MTP layer count on that starts.
#pragma once
#include <cstdio>

#include <nlohmann/json_fwd.hpp>

#include "model/stream_policy.h"

namespace sl::cli {

// `alias_from`: first_aliasing_mtp_layers() for the policy and config (-1: none). `every_stream`:
// one line per request (schedule); otherwise the counts and the aliasing only (run).
void print_stream_plan(std::FILE* out, const StreamPlan& plan, const StreamPolicy& policy, int alias_from,
                       bool every_stream = true);
// The same as JSON: {"source", "requested", "created", "streams": [...], "aliased": [...],
// "aliasing_from_mtp_layers"}.
nlohmann::json stream_plan_json(const StreamPlan& plan, const StreamPolicy& policy, int alias_from);

}  // namespace sl::cli
