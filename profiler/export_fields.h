// Field helpers shared by the exporters (kineto_json.cpp, nsys_sqlite.cpp): the -1 that both
// formats write for "no stream" / "no id". (The record counts by name are kRecordCountFields, in
// trace.h.)
#pragma once
#include <cstdint>

#include "profiler/trace.h"

namespace sl::prof {

// A stream or CUDA event id as written: -1 for `none` (kNoStream / kNoId, CUPTI's invalid value).
inline int64_t id_or_minus1(uint32_t id, uint32_t none) { return id == none ? -1 : int64_t(id); }

}  // namespace sl::prof
