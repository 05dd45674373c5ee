// The fast JSON loader (chunks of "traceEvents" parsed on several threads, merged in file order)
// gives exactly the precise loader's trace, event for event and string table entry for entry,
// whatever the chunk size and thread count; and wherever it cannot, it hands over so that
// errors stay the precise loader's.
#include <gtest/gtest.h>

#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "profiler/kineto_json.h"
#include "profiler/synthetic.h"
#include "profiler/trace_io.h"

using namespace sl::prof;
using json = nlohmann::json;

namespace {

JsonLoadOptions precise() {
  JsonLoadOptions o;
  o.fast = false;
  return o;
}

JsonLoadOptions chunked(unsigned threads, size_t chunk_bytes) {
  JsonLoadOptions o;
  o.threads = threads;
  o.chunk_bytes = chunk_bytes;
  return o;
}

// Loads `text` precisely and fast with several chunkings; every fast load must equal the
// precise one. Returns how many fast loads kept to the fast path.
size_t expect_fast_equals_precise(const std::string& text, const std::vector<JsonLoadOptions>& variants,
                                  const std::string& what) {
  Trace ref = load_kineto_json(text, "t.json", precise());
  size_t fast = 0;
  for (const JsonLoadOptions& o : variants) {
    JsonLoadStats st;
    Trace t = load_kineto_json(text, "t.json", o, &st);
    EXPECT_EQ(first_difference_by_id(ref, t), "") << what << ": threads " << o.threads << ", chunk " << o.chunk_bytes
                                      << (st.fast ? "" : ", fell back: " + st.fallback);
    fast += st.fast;
  }
  return fast;
}

std::vector<JsonLoadOptions> chunkings(std::vector<size_t> sizes) {
  std::vector<JsonLoadOptions> v{chunked(1, size_t(1) << 30)};
  for (size_t s : sizes) {
    v.push_back(chunked(2, s));
    v.push_back(chunked(4, s));
  }
  return v;
}

std::string error_of(const std::string& text, const JsonLoadOptions& o) {
  try {
    load_kineto_json(text, "t.json", o);
  } catch (const sl::Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(FastLoader, SyntheticTracesOfSeveralSizes) {
  for (size_t events : {300, 3000, 30000, 120000}) {
    SyntheticOptions o;
    o.target_events = events;
    std::string text = kineto_json_string(make_synthetic_trace(o));
    auto variants = chunkings({1000, 16384, 262144});
    size_t fast = expect_fast_equals_precise(text, variants, std::to_string(events) + " events");
    EXPECT_EQ(fast, variants.size()) << "our own files stay on the fast path";
  }
  // The sample trace uses every part of the model (and names that need escaping).
  std::string sample = kineto_json_string(make_sample_trace());
  EXPECT_EQ(expect_fast_equals_precise(sample, chunkings({64, 200, 1000, 5000}), "sample"), 9u);
}

TEST(FastLoader, ManyChunksActuallyRunOnThreads) {
  SyntheticOptions o;
  o.target_events = 20000;
  std::string text = kineto_json_string(make_synthetic_trace(o));
  JsonLoadStats st;
  load_kineto_json(text, "t.json", chunked(3, 4096), &st);
  EXPECT_TRUE(st.fast) << st.fallback;
  EXPECT_EQ(st.threads, 3u);
  EXPECT_GT(st.chunks, 100u);
  EXPECT_GT(st.json_events, 20000u);
}

// Chunk boundaries at every offset around names full of what a byte scanner could mistake for
// structure: quotes, backslashes, braces, brackets, commas, colons, escaped newlines, "},{",
// non-ASCII text and \u escapes.
TEST(FastLoader, ChunkBoundariesAroundTrickyStrings) {
  const std::vector<std::string> names = {
      "k\"},\n{\"ph\": \"X\"",  "a,b:c{d}[e]",      "\\\\server\\share",   "tab\there",
      "},{",                    "\"quoted\"",       "x\\\"},{\\\"y",       "ünïcødé ✓ 名前",
      "[{\"nested\": [1,2]}]",  "{\"ph\": \"Q\"}",  "end\\",               "\n],\n\"streamlab\": {",
  };
  Trace t;
  TraceBuilder b(t);
  Ns at = 1'000'000;
  for (int rep = 0; rep < 6; ++rep)
    for (const std::string& n : names) {
      b.kernel(7 + rep % 3, at, at + 900, n, at - 5000, at - 4000);
      b.nvtx(n, at - 6000, at + 2000, rep % 2 ? std::string_view(n) : std::string_view());
      at += 3000;
    }
  t.base_time = 1'000'000;
  t.finalize();
  std::string text = kineto_json_string(t);
  // A raw newline only appears between events; names hold escaped ones.
  std::vector<JsonLoadOptions> variants{chunked(1, size_t(1) << 30)};
  for (size_t s = 16; s < 1200; s += 37) variants.push_back(chunked(2, s));
  size_t fast = expect_fast_equals_precise(text, variants, "tricky names");
  EXPECT_EQ(fast, variants.size());
  Trace back = load_kineto_json(text, "t.json", chunked(2, 100));
  EXPECT_EQ(first_difference(t, back, true), "") << "and it is still the lossless round trip";
}

TEST(FastLoader, PyTorchLayout) {
  SyntheticOptions o;
  o.target_events = 30000;
  Trace src = make_synthetic_trace(o);
  std::string text = pytorch_profiler_json(src);
  auto variants = chunkings({2000, 65536});
  EXPECT_EQ(expect_fast_equals_precise(text, variants, "pytorch layout"), variants.size());
  Trace t = load_kineto_json(text, "t.json", chunked(2, 4096));
  EXPECT_EQ(t.metadata.at("source"), "kineto");
  EXPECT_EQ(t.kernels.size(), src.kernels.size());
  EXPECT_EQ(t.api_calls.size(), src.api_calls.size());
  EXPECT_FALSE(t.allocations.empty()) << "[memory] events";
  EXPECT_FALSE(t.processes.empty());
  // GPU activities come in completion order: the loader sorts them.
  for (size_t i = 1; i < t.kernels.size(); ++i) ASSERT_LE(t.kernels[i - 1].start, t.kernels[i].start);
}

// Layouts the fast loader has to guess about (where baseTimeNanoseconds and the block are) or
// cannot split: still the precise loader's trace.
TEST(FastLoader, OtherLayoutsOfTheSameDocument) {
  SyntheticOptions o;
  o.target_events = 5000;
  std::string ours = kineto_json_string(make_synthetic_trace(o));
  json doc = json::parse(ours);
  auto variants = chunkings({500, 8192});
  // Keys sorted (nlohmann's order): the block and baseTimeNanoseconds before the events.
  expect_fast_equals_precise(doc.dump(), variants, "minified, keys sorted");
  expect_fast_equals_precise(doc.dump(1), variants, "pretty, one space");
  expect_fast_equals_precise(doc.dump(4), variants, "pretty, four spaces");
  // baseTimeNanoseconds given twice: the last one counts.
  std::string twice = ours;
  twice.insert(twice.rfind('}'), ", \"baseTimeNanoseconds\": 5");
  expect_fast_equals_precise(twice, variants, "baseTimeNanoseconds twice");
  // No block: the same events read as a PyTorch trace (counters, process names kept).
  json no_block = doc;
  no_block.erase("streamlab");
  std::string s = no_block.dump(1);
  expect_fast_equals_precise(s, variants, "no block");
  // A block that is not an object counts as no block.
  json odd = doc;
  odd["streamlab"] = 7;
  expect_fast_equals_precise(odd.dump(1), variants, "block not an object");
  // An event whose args hold a pretty-printed array of objects: ",\n{" inside an event.
  json nested = no_block;
  nested["traceEvents"][3]["args"]["list"] = json::array({json::object({{"a", 1}}), json::object({{"b", 2}})});
  expect_fast_equals_precise(nested.dump(2), variants, "objects nested in args");
  // The PyTorch sample of test_loader, split everywhere.
  std::string pt = pytorch_profiler_json(make_sample_trace());
  std::vector<JsonLoadOptions> fine{chunked(1, size_t(1) << 30)};
  for (size_t c = 8; c < 3000; c += 97) fine.push_back(chunked(2, c));
  expect_fast_equals_precise(pt, fine, "pytorch sample");
}

// Malformed input: the fast loader hands over, so errors (byte offsets, event indexes) are the
// precise loader's, word for word.
TEST(FastLoader, ErrorsAreThePreciseLoadersErrors) {
  SyntheticOptions o;
  o.target_events = 2000;
  std::string s = kineto_json_string(make_synthetic_trace(o));
  std::vector<std::string> docs = {
      "", "{", "[]", "{\"traceEvents\": [1, 2,, 3]}", "{\"traceEvents\": [{\"ph\": \"X\"},]}",
      "{\"traceEvents\": [{\"ph\": \"X\"} {\"ph\": \"X\"}]}", "{\"traceEvents\": [{\"ph\": \"Q\"}]}",
      "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"ts\": 01}]}",
      "{\"traceEvents\": [{\"ph\": \"i\", \"name\": \"\\udc00\"}]}",
      "{\"traceEvents\": [{\"ph\": \"i\", \"name\": \"a\\qb\"}]}",
      "{\"traceEvents\": [{\"ph\": \"X\", \"x\": 1e99999}]}",
      "{\"traceEvents\": [{\"ph\": \"X\", \"x\": 123456789012345678901234567890}]}",
      "{\"traceEvents\": [\n{\"ph\": \"X\"},\n{\"ph\": \"i\"}\n]",  // the document never closes
      "{\"traceEvents\": [\n{\"ph\": \"X\"},\n{\"ph\": \"i\"}\n]}, \"x\": 1}",
      "{\"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, \"ts\": 1.0, "
      "\"dur\": 1.0, \"args\": {\"stream\": \"seven\"}}]}",
  };
  std::mt19937 rng(5);
  const char junk[] = {'"', '{', '}', '[', ']', ',', ':', '0', 'x', '-', ' ', 'e', '.', '\\', '\n'};
  for (int i = 0; i < 60; ++i) {
    std::string c = s;
    for (int k = 0; k < 2; ++k) c[rng() % c.size()] = junk[rng() % sizeof junk];
    docs.push_back(c);
  }
  for (size_t cut : {s.size() / 3, s.size() / 2, s.size() - 10}) docs.push_back(s.substr(0, cut));
  size_t errors = 0;
  for (const std::string& d : docs) {
    std::string want = error_of(d, precise());
    errors += !want.empty();
    for (const JsonLoadOptions& v : {chunked(1, size_t(1) << 30), chunked(2, 300), chunked(4, 4096)}) {
      EXPECT_EQ(error_of(d, v), want) << d.substr(0, 200);
      if (want.empty()) {
        EXPECT_EQ(first_difference_by_id(load_kineto_json(d, "t.json", precise()), load_kineto_json(d, "t.json", v)), "");
      }
    }
  }
  EXPECT_GT(errors, 30u);
}

// Deep nesting never crashes (no unbounded recursion): the fast loader stops following at a
// fixed depth and hands over.
TEST(FastLoader, DeepNesting) {
  for (int depth : {10, 60, 70, 500, 5000}) {
    std::string deep = std::string(size_t(depth), '[') + std::string(size_t(depth), ']');
    std::string text = "{\"traceEvents\": [\n{\"ph\": \"X\", \"cat\": \"cpu_op\", \"args\": {\"x\": " + deep +
                       "}},\n{\"ph\": \"i\", \"name\": \"m\", \"deep\": " + deep + "}\n]}";
    JsonLoadStats st;
    Trace a = load_kineto_json(text, "deep.json", chunked(2, 64), &st);
    EXPECT_EQ(first_difference_by_id(load_kineto_json(text, "deep.json", precise()), a), "") << depth;
    EXPECT_EQ(st.fast, depth <= 60) << depth << " " << st.fallback;
  }
}

TEST(FastLoader, FilesAndTextAgree) {
  SyntheticOptions o;
  o.target_events = 50000;
  Trace t = make_synthetic_trace(o);
  std::string path = testing::TempDir() + "/fast_loader.json";
  write_kineto_json_file(t, path);
  JsonLoadStats st;
  Trace from_file = load_kineto_json_file(path, chunked(2, 65536), &st);
  EXPECT_TRUE(st.fast) << st.fallback;
  EXPECT_EQ(first_difference_by_id(load_kineto_json_file(path, precise()), from_file), "");
  EXPECT_EQ(first_difference(t, from_file, true), "");
  EXPECT_EQ(detect_trace_format(path), TraceFormat::StreamlabJson);
  std::string pt = testing::TempDir() + "/fast_loader_pt.json";
  write_pytorch_profiler_json_file(t, pt);
  EXPECT_EQ(detect_trace_format(pt), TraceFormat::KinetoJson);
  Trace a = load_kineto_json_file(pt, chunked(2, 65536), &st);
  EXPECT_TRUE(st.fast) << st.fallback;
  EXPECT_EQ(first_difference_by_id(load_kineto_json_file(pt, precise()), a), "");
}

// Our block comes last; with several threads it is read while the events are parsed, at a tail
// guessed from where the block starts. The precise loader's trace whether the guess is right or
// not, whether the block sets the record counts or not; its error when the block has one.
TEST(FastLoader, BlockReadWhileEventsAreParsed) {
  SyntheticOptions o;
  o.target_events = 40000;
  const std::string text = kineto_json_string(make_synthetic_trace(o));
  const size_t block = text.rfind("\"streamlab\": {");
  ASSERT_NE(block, std::string::npos);
  ASSERT_GT(text.size() - block, size_t(64) << 10) << "a tail the loader reads early";
  const std::vector<JsonLoadOptions> variants{chunked(2, 65536), chunked(3, 16384), chunked(1, size_t(1) << 30)};
  JsonLoadStats st;
  load_kineto_json(text, "t.json", chunked(3, 65536), &st);
  EXPECT_TRUE(st.fast) << st.fallback;
  EXPECT_GT(st.frame_early_s, 0) << "the block is read while the events are parsed";
  EXPECT_EQ(expect_fast_equals_precise(text, variants, "block read early"), variants.size());

  // Counts given by the block (they replace the events'), or not (the events' count: one ends
  // before it starts).
  std::string counts = text;
  counts.insert(counts.find("\"dur\": ") + 7, "-");
  counts.replace(counts.find("\"dropped\": 0", block), 12, "\"dropped\": 5");
  EXPECT_EQ(expect_fast_equals_precise(counts, variants, "block counts"), variants.size());
  std::string no_counts = counts;
  const size_t c = no_counts.find("\"counts\": {", block);
  no_counts.erase(c, no_counts.find("},", c) + 3 - c);
  EXPECT_EQ(load_kineto_json(no_counts, "t.json", precise()).counts.end_before_start, 1u);
  EXPECT_EQ(expect_fast_equals_precise(no_counts, variants, "no block counts"), variants.size());

  // A decoy before the block: the last event holds "[1], "streamlab": {...}" (fields nobody
  // reads), which the guess finds first. The guess is wrong; the events' real end decides.
  std::string decoy = text;
  decoy.insert(decoy.rfind("\n{\"", block) + 2, "\"s_list\": [1], \"streamlab\": {\"x\": 1}, ");
  EXPECT_EQ(expect_fast_equals_precise(decoy, variants, "decoy"), variants.size());
  // The same decoy in a document without our block, with a long tail (keys sorted: "zzz" after
  // the events): the guess also says "ours", wrongly; the events are read again as PyTorch's.
  json doc = json::parse(decoy);
  doc.erase("streamlab");
  doc["zzz"] = json::array();
  for (int i = 0; i < 20000; ++i) doc["zzz"].push_back(i);
  const std::string not_ours = doc.dump(1);
  const Trace want = load_kineto_json(not_ours, "t.json", precise());
  for (const JsonLoadOptions& v : variants) {
    Trace t = load_kineto_json(not_ours, "t.json", v, &st);
    EXPECT_EQ(first_difference_by_id(want, t), "") << "not ours, threads " << v.threads;
    EXPECT_TRUE(st.fast) << st.fallback;
    if (v.threads > 1) {
      EXPECT_EQ(st.retries, 1u) << "the wrong guess is noticed";
    }
  }

  // An error in the block is the precise loader's.
  std::string bad = text;
  const size_t row = bad.find("\n[", bad.find("\"cuda_events\": [", block));
  bad.insert(row + 1, "[1, 2],");
  const std::string want_error = error_of(bad, precise());
  EXPECT_NE(want_error.find("streamlab.cuda_events"), std::string::npos) << want_error;
  for (const JsonLoadOptions& v : variants) EXPECT_EQ(error_of(bad, v), want_error);
}

// distributedInfo (PyTorch's profiler writes it; HTA keys a job's traces by its rank): both loaders
// read the rank and world size, refuse values that cannot be a rank, and our writer puts them back.
TEST(FastLoader, DistributedInfoRankAndWorldSize) {
  auto doc = [](const std::string& info) {
    return "{\"schemaVersion\": 1, \"distributedInfo\": " + info +
           ", \"traceEvents\": [{\"ph\": \"X\", \"cat\": \"kernel\", \"name\": \"k\", \"pid\": 0, \"tid\": 7, "
           "\"ts\": 1.0, \"dur\": 2.0, \"args\": {\"stream\": 7, \"correlation\": 1}}]}";
  };
  for (const JsonLoadOptions& o : {precise(), chunked(2, 64)}) {
    const Trace t = load_kineto_json(doc("{\"backend\": \"nccl\", \"rank\": 3, \"world_size\": 8}"), "t.json", o);
    EXPECT_EQ(t.rank, 3);
    EXPECT_EQ(t.world_size, 8);
    const Trace n = load_kineto_json(doc("{}"), "t.json", o);  // not said: unknown
    EXPECT_EQ(n.rank, -1);
    EXPECT_EQ(n.world_size, 0);
    struct Bad {
      const char* info;
      const char* says;
    };
    for (const Bad& b : {Bad{"{\"rank\": -1}", "distributedInfo.rank"}, Bad{"{\"rank\": \"0\"}", "distributedInfo.rank"},
                         Bad{"{\"rank\": 1.5}", "distributedInfo.rank"},
                         Bad{"{\"rank\": 0, \"world_size\": 99999999999}", "distributedInfo.world_size"},
                         Bad{"{\"rank\": 4, \"world_size\": 4}", "rank 4 is outside world_size 4"},
                         Bad{"[0]", "\"distributedInfo\" to be an object"}}) {
      SCOPED_TRACE(b.info);
      const std::string e = error_of(doc(b.info), o);
      EXPECT_NE(e.find(b.says), std::string::npos) << e;
    }
  }
  // Written back: the trace's own rank and world size, or the writer's when given.
  Trace t = load_kineto_json(doc("{\"rank\": 3, \"world_size\": 8}"), "t.json", precise());
  std::ostringstream out;
  write_kineto_json(t, out);
  const json j = json::parse(out.str());
  EXPECT_EQ(j["distributedInfo"]["rank"], 3);
  EXPECT_EQ(j["distributedInfo"]["world_size"], 8);
  // HTA reads the rank with the regex "rank":\s+(\d+).
  EXPECT_NE(out.str().find("\"rank\": 3"), std::string::npos);
  KinetoOptions ko;
  ko.rank = 1;
  ko.world_size = 2;
  std::ostringstream out2;
  write_kineto_json(t, out2, ko);
  const json j2 = json::parse(out2.str());
  EXPECT_EQ(j2["distributedInfo"]["rank"], 1);
  EXPECT_EQ(j2["distributedInfo"]["world_size"], 2);
  // A trace that does not say writes rank 0 and no world size (as before).
  Trace u = load_kineto_json(doc("{}"), "t.json", precise());
  std::ostringstream out3;
  write_kineto_json(u, out3);
  const json j3 = json::parse(out3.str());
  EXPECT_EQ(j3["distributedInfo"]["rank"], 0);
  EXPECT_FALSE(j3["distributedInfo"].contains("world_size"));
}
