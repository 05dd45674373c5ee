// Loading traces back into the trace model: our Kineto-style JSON (lossless: it carries a
// "streamlab" block), PyTorch profiler (Kineto) JSON, and our Nsight-layout SQLite. The format is
// detected from the content, not the file name.
//
// Malformed input never crashes: it raises sl::Error naming the file, the byte offset (JSON
// syntax) or the event index / table row, and what was expected.
#pragma once
#include <string>
#include <string_view>

#include "profiler/trace.h"

namespace sl::prof {

enum class TraceFormat { Unknown, StreamlabJson, KinetoJson, Sqlite };
const char* to_string(TraceFormat f);

// Looks at the first bytes (and for JSON whether a "streamlab" block is present). Throws
// sl::Error when the file cannot be read.
TraceFormat detect_trace_format(const std::string& path);

// Any supported format. The result is finalized.
Trace load_trace(const std::string& path);

// JSON text (ours or PyTorch's); `origin` names the source in error messages.
Trace load_kineto_json(std::string_view text, const std::string& origin);
Trace load_kineto_json_file(const std::string& path);

}  // namespace sl::prof
