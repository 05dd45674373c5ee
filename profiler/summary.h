// Summaries of an analysis: JSON (machine-readable, stable keys, times in ns), CSV tables and a
// human-readable text report.
#pragma once
#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

#include "profiler/analysis.h"
#include "profiler/trace.h"

namespace sl::prof {

// Everything in the result. Times are integers in ns; fractions are 0..1.
nlohmann::json analysis_to_json(const AnalysisResult& r);

// Human-readable report; `top` limits the kernel table.
std::string analysis_to_text(const AnalysisResult& r, size_t top = 15);

// CSV tables (header row, comma-separated, RFC 4180 quoting).
void write_streams_csv(const AnalysisResult& r, std::ostream& out);
void write_kernel_stats_csv(const AnalysisResult& r, std::ostream& out);
void write_ranges_csv(const AnalysisResult& r, std::ostream& out);     // per range instance
void write_summary_csv(const AnalysisResult& r, std::ostream& out);    // key,value
void write_gpu_ops_csv(const Trace& t, std::ostream& out);             // one row per kernel / memcpy / memset

// Writes summary.csv, streams.csv, kernel_stats.csv, gpu_ops.csv and (with a range) ranges.csv
// into `dir` (created when missing; its parent must exist), all or none: on an I/O error (thrown
// as sl::Error) the folder is left as it was. Returns the files written; an earlier export's
// ranges.csv that this one does not replace is removed and named in *removed.
std::vector<std::string> write_csv_dir(const Trace& t, const AnalysisResult& r, const std::string& dir,
                                       std::vector<std::string>* removed = nullptr);

// Resource counts seen as API calls (ResourceSummary::api): JSON object and one line of text.
// Shared with the trace profile's report.
nlohmann::json api_counts_json(const ApiCallCounts& c);
std::string api_counts_text(const ApiCallCounts& c);

// One line per record-quality problem (dropped, zero timestamps, end < start, invalid); empty
// when the trace is clean.
std::string record_count_warnings(const RecordCounts& c);

}  // namespace sl::prof
