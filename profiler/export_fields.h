// Field helpers shared by the exporters (kineto_json.cpp, nsys_sqlite.cpp): the record counts by
// name, and the -1 that both formats write for "no stream" / "no id".
#pragma once
#include <cstdint>

#include "profiler/trace.h"

namespace sl::prof {

// RecordCounts by name, in the order the exports write them: Kineto JSON "streamlab" -> "counts"
// {"<name>": N, ...} and SQLite STREAMLAB_META rows "count.<name>".
struct RecordCountField {
  const char* name;
  uint64_t RecordCounts::*member;
};
inline constexpr RecordCountField kRecordCountFields[] = {
    {"dropped", &RecordCounts::dropped},
    {"zero_timestamps", &RecordCounts::zero_timestamps},
    {"end_before_start", &RecordCounts::end_before_start},
    {"overhead_records", &RecordCounts::overhead_records},
    {"invalid_records", &RecordCounts::invalid_records},
    {"unknown_kinds", &RecordCounts::unknown_kinds},
    {"warmup_discarded", &RecordCounts::warmup_discarded},
    {"buffers", &RecordCounts::buffers},
    {"buffer_bytes", &RecordCounts::buffer_bytes},
    {"pool_exhausted", &RecordCounts::pool_exhausted},
};

// A stream or CUDA event id as written: -1 for `none` (kNoStream / kNoId, CUPTI's invalid value).
inline int64_t id_or_minus1(uint32_t id, uint32_t none) { return id == none ? -1 : int64_t(id); }

}  // namespace sl::prof
