// The fast JSON loader: "traceEvents" cut into chunks at event boundaries, each chunk parsed with
// simdjson On-Demand on one of several threads into chunk-local records; then one short pass in
// file order interns the chunks' names and gives each chunk its place in the trace's vectors,
// and the threads copy the records there. Everything outside "traceEvents" (the top level,
// deviceProperties, our "streamlab" block) is parsed by the precise loader's code, with the array
// left out; our block, which comes last and can be large, is read by one thread while the others
// parse the events (where the events end is guessed from where the block starts, and checked).
//
// Why it gives the same trace as the precise loader (trace_io.cpp):
// - every event goes through the same json_events::read_event;
// - it gives up (and the precise loader runs, naming the error) on anything it does not read
//   exactly as the precise loader would: malformed JSON, a field of the wrong type, a number
//   simdjson cannot hold, nesting deeper than kMaxDepth, a key with escapes at the top level;
// - every byte is validated: each chunk "[" + events + "]" is walked completely (no value is
//   skipped unchecked), and the rest of the document is parsed by simdjson's DOM parser. The cut
//   points are found by a heuristic (a newline between "," and "{"; a raw newline cannot be
//   inside a JSON string), but a wrong cut cannot go unnoticed: if "[c0]", "[c1]", ... all parse
//   and c0 starts right after the array's "[", each comma between chunks is a separator of the
//   array itself (the text before it is a balanced run of complete values);
// - names are interned per chunk in first-use order and the chunks' tables merged in file
//   order, then the block's (read into a table of its own), so the string table comes out in the
//   same order as when interning one event at a time.
//
// What only counts in PyTorch traces (allocator "[memory]" events, process / thread names,
// counters) depends on whether the document carries our block, which usually comes after the
// events. Until it is known, those events are read speculatively and kept aside; counters are
// the only ones that intern names, so the first chunk with counters makes the loader look for
// the block near the end of the file (a guess, checked against the parsed block; a wrong guess
// about it or about baseTimeNanoseconds redoes the events once).
//
// Memory: chunks are read (pread, or copied from the text) into reused per-thread buffers, so
// a large file is never held whole. The chunks' records are held until placed, in mappings of
// their own; placing copies them into the trace's vectors in file order and releases each
// chunk's as soon as it is copied, so the records are held about once (peak: the trace model,
// the chunks not yet copied, then finalize's sort keys; bench_trace_load prints it).
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <charconv>
#include <chrono>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <tuple>
#include <vector>

#include <simdjson.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "core/error.h"
#include "profiler/json_events.h"
#include "profiler/parallel.h"
#include "profiler/trace_io_detail.h"

namespace sl::prof::trace_io_detail {

namespace {

namespace dom = simdjson::dom;
using namespace json_events;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Thrown inside the fast loader when the precise loader has to take over.
struct FastMiss {
  const char* why;
};

constexpr size_t kDefaultChunkBytes = size_t(1) << 20;
// Where a chunk's cut is looked for first: the end of its window (events are rarely longer).
constexpr size_t kCutProbeBytes = size_t(16) << 10;
// The largest chunk: events and the document's tail are cut at newlines (see cut_reading_all).
constexpr size_t kMaxChunkBytes = size_t(256) << 20;
// Nesting below an event's fields that the fast loader follows; deeper goes to the precise
// loader (bounded recursion here; the precise one accepts up to 10000 levels).
constexpr int kMaxDepth = 64;
// Measured on the H200 host's 16-core Xeon (results/2026-12-04-h200-round11/c8): a 3M-event file
// loads at 8.0M events/s with 8 threads and 12.8M with 16; the default takes up to 16.
constexpr size_t kMaxThreads = 16;
// Where the header (everything before "traceEvents") must end, and how far from the end the
// block and baseTimeNanoseconds are looked for.
constexpr size_t kMaxHeaderBytes = size_t(64) << 20;
constexpr size_t kBlockProbeBytes = size_t(64) << 20;
constexpr size_t kBaseProbeBytes = size_t(64) << 10;
// How far from the end an event ("ph") is looked for: none there, a large tail may follow them.
constexpr size_t kTailProbeBytes = size_t(64) << 10;

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// ---------------------------------------------------------------- one event's values

// Number: checked, not converted yet (converted when read: most numbers of skipped events never are).
enum class Kind : uint8_t { Null, Bool, Int64, UInt64, Double, String, Array, Object, Number };

struct Scalar {
  Kind kind = Kind::Null;
  union {
    int64_t i = 0;
    uint64_t u;
    double d;
    bool b;
  };
  std::string_view s;  // Kind::String, unescaped (valid until the parser's next document)
};

// A field or arg: arrays keep their length and first three elements (grid / block dims).
// A number's text checked against JSON's grammar: where its digits are, how many.
struct NumberShape {
  const char* digits = nullptr;  // the first digit (after any "-")
  uint16_t int_digits = 0, frac_digits = 0;
  bool negative = false, exponent = false;
};

struct Value : Scalar {
  uint32_t count = 0;
  Scalar items[3];
  NumberShape shape;  // Kind::Number: what to convert
};

// ---------------------------------------------------------------- JSON over the stage-1 index

// One chunk's bytes and simdjson's stage-1 index of them: the position of every structural
// character ({ } [ ] , :) outside strings and of the first byte of every scalar (string, number,
// true / false / null). Stage 1 has checked the UTF-8, that strings are closed and hold no
// unescaped control characters; the walk below checks everything else: the grammar, numbers,
// atoms and escapes. Any doubt fails (false), and the precise loader takes over.
class Tokens {
 public:
  // index has room for two more entries after its n (simdjson allocates it so): set to len,
  // where buf has a zero byte, so that the walk needs no bounds checks (token n reads as '\0').
  void reset(const char* buf, size_t len, uint32_t* index, size_t n, char* arena) {
    index[n] = index[n + 1] = uint32_t(len);
    buf_ = buf, index_ = index, n_ = n, arena_ = arena;
  }
  size_t count() const { return n_; }
  char ch(size_t i) const { return buf_[index_[i]]; }
  size_t pos(size_t i) const { return index_[i]; }

  // Token i is a string: its content, unescaped (escaped ones decoded into the arena).
  bool string(size_t i, std::string_view& out) {
    const char* b = buf_ + pos(i) + 1;
    const char* e = buf_ + pos(i + 1);
    while (e > b && is_ws(e[-1])) --e;
    if (e <= b || e[-1] != '"') return false;  // junk after the closing quote
    --e;
    if (needs_unescape(b, e)) return unescape(b, e, out);
    out = std::string_view(b, size_t(e - b));
    return true;
  }

  // Token i is a number: its shape checked against JSON's grammar.
  bool scan_number(size_t i, NumberShape& n) const {
    const char* p = buf_ + pos(i);
    n.negative = *p == '-';
    p += n.negative;
    n.digits = p;
    const size_t int_digits = digit_run(p);
    if (int_digits == 0 || (int_digits > 1 && *p == '0')) return false;  // no digit, or a leading zero
    p += int_digits;
    size_t frac_digits = 0;
    if (*p == '.') {
      frac_digits = digit_run(++p);
      if (frac_digits == 0) return false;
      p += frac_digits;
    }
    n.exponent = *p == 'e' || *p == 'E';
    if (n.exponent) {
      ++p;
      if (*p == '+' || *p == '-') ++p;
      const size_t exp_digits = digit_run(p);
      if (exp_digits == 0) return false;
      p += exp_digits;
    }
    // Nothing but whitespace up to the next token.
    for (const char* e = buf_ + pos(i + 1); p < e; ++p)
      if (!is_ws(*p)) return false;
    if (int_digits > 0xFFFF || frac_digits > 0xFFFF) return false;
    n.int_digits = uint16_t(int_digits), n.frac_digits = uint16_t(frac_digits);
    return true;
  }

  // A scanned number as simdjson types it: an integer that fits int64 is Int64, a larger one
  // UInt64 (beyond: an error), anything with a fraction or exponent Double (out of range: an
  // error); -0 is Int64 0.
  static bool convert(const NumberShape& n, Scalar& out) {
    if (n.frac_digits || n.exponent) {
      out.kind = Kind::Double;
      if (!n.exponent && n.int_digits + n.frac_digits <= 15) {
        // Exact: the digits (< 2^53) and 10^k (k <= 15) are exact doubles, and one division of
        // exact doubles is correctly rounded, i.e. the double from_chars and simdjson give.
        const uint64_t m = parse_digits(n.digits + n.int_digits + 1, n.frac_digits, parse_digits(n.digits, n.int_digits, 0));
        out.d = double(m) / kPow10[n.frac_digits];
        if (n.negative) out.d = -out.d;
        return true;
      }
      const char* start = n.digits - n.negative;
      const char* end = n.digits + n.int_digits + (n.frac_digits ? 1 + n.frac_digits : 0);
      if (n.exponent) {
        ++end;  // past "e"
        if (*end == '+' || *end == '-') ++end;
        end += digit_run(end);
      }
      auto [stop, ec] = std::from_chars(start, end, out.d, std::chars_format::general);
      return ec == std::errc() && stop == end && std::isfinite(out.d);  // out of range: simdjson refuses too
    }
    if (n.int_digits > 20) return false;
    uint64_t m = parse_digits(n.digits, std::min<size_t>(n.int_digits, 19), 0);
    if (n.int_digits == 20) {  // 10^19 <= it < 10^20: past uint64 unless it fits
      const uint64_t last = uint64_t(n.digits[19] - '0');
      if (m > (UINT64_MAX - last) / 10) return false;
      m = m * 10 + last;
    }
    if (n.negative) {
      if (m > uint64_t(INT64_MAX) + 1) return false;
      out.kind = Kind::Int64, out.i = int64_t(0 - m);
    } else if (m <= uint64_t(INT64_MAX)) {
      out.kind = Kind::Int64, out.i = int64_t(m);
    } else {
      out.kind = Kind::UInt64, out.u = m;
    }
    return true;
  }
  // Whether a scanned number converts without error (checked now for what is converted later:
  // only long integers and exponents can be out of range).
  static bool in_range(const NumberShape& n) {
    if (n.exponent || (!n.frac_digits && n.int_digits >= 19) || n.int_digits >= 300) {
      Scalar ignored;
      return convert(n, ignored);
    }
    return true;
  }
  bool number(size_t i, Scalar& out) const {
    NumberShape n;
    return scan_number(i, n) && convert(n, out);
  }
  bool check_number(size_t i) const {
    NumberShape n;
    return scan_number(i, n) && in_range(n);
  }

  // Token i is exactly `word`.
  bool atom(size_t i, std::string_view word) const {
    const char* p = buf_ + pos(i);
    const char* e = buf_ + pos(i + 1);
    while (e > p && is_ws(e[-1])) --e;
    return std::string_view(p, size_t(e - p)) == word;
  }

  // Any value at token i as a Scalar (containers: checked through, only their kind kept);
  // i moves past it.
  bool scalar(size_t& i, Scalar& out, int depth) {
    switch (ch(i)) {
      case '"': out.kind = Kind::String; return string(i++, out.s);
      case 't': out.kind = Kind::Bool, out.b = true; return atom(i++, "true");
      case 'f': out.kind = Kind::Bool, out.b = false; return atom(i++, "false");
      case 'n': out.kind = Kind::Null; return atom(i++, "null");
      case '[': out.kind = Kind::Array; return skip(i, depth);
      case '{': out.kind = Kind::Object; return skip(i, depth);
      default: return number(i++, out);
    }
  }

  // A value: arrays keep their length and first three elements.
  bool value(size_t& i, Value& out, int depth, bool lazy = false) {
    const char c = ch(i);
    if (lazy && (c == '-' || (c >= '0' && c <= '9'))) {
      out.kind = Kind::Number;
      return scan_number(i++, out.shape) && in_range(out.shape);
    }
    if (c != '[') return scalar(i, out, depth);
    if (depth >= kMaxDepth) return false;
    out.kind = Kind::Array;
    out.count = 0;
    if (ch(++i) == ']') return ++i, true;
    for (;;) {
      Scalar ignored;
      if (!scalar(i, out.count < 3 ? out.items[out.count] : ignored, depth + 1)) return false;
      ++out.count;
      const char c = ch(i++);
      if (c == ']') return true;
      if (c != ',') return false;
    }
  }

  // Checks the value at token i completely and moves past it (nothing is skipped unchecked).
  bool skip(size_t& i, int depth) {
    if (depth >= kMaxDepth) return false;
    const char open = ch(i);
    if (open != '[' && open != '{') {
      Scalar ignored;
      if (open == '-' || (open >= '0' && open <= '9')) return check_number(i++);
      return scalar(i, ignored, depth);
    }
    const char close = open == '[' ? ']' : '}';
    if (ch(++i) == close) return ++i, true;
    for (;;) {
      if (open == '{') {
        std::string_view key;
        if (ch(i) != '"' || !string(i++, key) || ch(i++) != ':') return false;
      }
      if (!skip(i, depth + 1)) return false;
      const char c = ch(i++);
      if (c == close) return true;
      if (c != ',') return false;
    }
  }

  // An object at token i: `on_field(key, i)` reads each value (moving i past it).
  template <class F>
  bool object(size_t& i, F&& on_field) {
    if (ch(i) != '{') return false;
    if (ch(++i) == '}') return ++i, true;
    for (;;) {
      std::string_view key;
      if (ch(i) != '"' || !string(i++, key) || ch(i++) != ':' || !on_field(key, i)) return false;
      const char c = ch(i++);
      if (c == '}') return true;
      if (c != ',') return false;
    }
  }

 private:
  static constexpr double kPow10[] = {1e0, 1e1, 1e2,  1e3,  1e4,  1e5,  1e6,  1e7,
                                      1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15};

  // How many ASCII digits start at p. Reads 16 bytes at a time: tokens lie in a chunk buffer
  // with simdjson's padding (zeros) after its end.
  static size_t digit_run(const char* p) {
    size_t n = 0;
#if defined(__SSE2__)
    for (;;) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p + n));
      // '0'..'9' -> -128..-119 (signed), everything else above.
      const __m128i shifted = _mm_sub_epi8(v, _mm_set1_epi8(char('0' + 128)));
      const unsigned digits = unsigned(_mm_movemask_epi8(_mm_cmplt_epi8(shifted, _mm_set1_epi8(char(-128 + 10)))));
      const unsigned run = unsigned(__builtin_ctz(~digits));
      n += run;
      if (run < 16) return n;
    }
#else
    while (p[n] >= '0' && p[n] <= '9') ++n;
    return n;
#endif
  }
  // acc * 10^n + the n digits at p (eight at a time: SWAR on a little-endian word).
  // Reads whole words: digits lie in a chunk buffer with padding after its end.
  static uint64_t parse_digits(const char* p, size_t n, uint64_t acc) {
    if constexpr (std::endian::native == std::endian::little) {
      for (; n >= 8; n -= 8, p += 8) acc = acc * 100000000 + eight_digits(load8(p));
      if (n == 0) return acc;
      // The last 1..7 digits moved to the top of the word: the zero bytes below read as leading
      // zeros.
      return acc * kPow10Int[n] + eight_digits(load8(p) << (8 * (8 - n)));
    } else {
      for (; n > 0; --n) acc = acc * 10 + uint64_t(*p++ - '0');
      return acc;
    }
  }
  static uint64_t load8(const char* p) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
  }
  // Eight ASCII digits, the first in the lowest byte (SWAR).
  static uint64_t eight_digits(uint64_t v) {
    v = (v & 0x0F0F0F0F0F0F0F0Full) * 2561 >> 8;
    v = (v & 0x00FF00FF00FF00FFull) * 6553601 >> 16;
    return (v & 0x0000FFFF0000FFFFull) * 42949672960001ull >> 32;
  }
  static constexpr uint64_t kPow10Int[] = {1, 10, 100, 1000, 10000, 100000, 1000000, 10000000};

  // Whether [b, e) holds a quote or a backslash. Reads up to 15 bytes past e: the chunk buffer
  // has simdjson's padding after its end.
  static bool needs_unescape(const char* b, const char* e) {
#if defined(__SSE2__)
    const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\');
    for (const char* p = b; p < e; p += 16) {
      const __m128i v = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
      unsigned m = unsigned(_mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash))));
      if (m) return p + __builtin_ctz(m) < e;
    }
    return false;
#else
    for (const char* p = b; p < e; ++p)
      if (*p == '"' || *p == '\\') return true;
    return false;
#endif
  }

  static int hex(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  }
  static bool hex4(const char* p, const char* e, uint32_t& v) {
    if (e - p < 4) return false;
    v = 0;
    for (int k = 0; k < 4; ++k) {
      int h = hex(p[k]);
      if (h < 0) return false;
      v = v * 16 + uint32_t(h);
    }
    return true;
  }
  // JSON escapes into the arena; a surrogate must come as a proper pair (as nlohmann requires).
  bool unescape(const char* p, const char* e, std::string_view& out) {
    char* start = arena_;
    char* o = arena_;
    while (p < e) {
      char c = *p++;
      if (c == '"') return false;
      if (c != '\\') {
        *o++ = c;
        continue;
      }
      if (p >= e) return false;
      switch (c = *p++) {
        case '"': *o++ = '"'; break;
        case '\\': *o++ = '\\'; break;
        case '/': *o++ = '/'; break;
        case 'b': *o++ = '\b'; break;
        case 'f': *o++ = '\f'; break;
        case 'n': *o++ = '\n'; break;
        case 'r': *o++ = '\r'; break;
        case 't': *o++ = '\t'; break;
        case 'u': {
          uint32_t cp;
          if (!hex4(p, e, cp)) return false;
          p += 4;
          if (cp >= 0xDC00 && cp <= 0xDFFF) return false;
          if (cp >= 0xD800 && cp <= 0xDBFF) {
            uint32_t lo;
            if (e - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, e, lo) || lo < 0xDC00 || lo > 0xDFFF) return false;
            p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          if (cp < 0x80) {
            *o++ = char(cp);
          } else if (cp < 0x800) {
            *o++ = char(0xC0 | (cp >> 6)), *o++ = char(0x80 | (cp & 0x3F));
          } else if (cp < 0x10000) {
            *o++ = char(0xE0 | (cp >> 12)), *o++ = char(0x80 | ((cp >> 6) & 0x3F)), *o++ = char(0x80 | (cp & 0x3F));
          } else {
            *o++ = char(0xF0 | (cp >> 18)), *o++ = char(0x80 | ((cp >> 12) & 0x3F));
            *o++ = char(0x80 | ((cp >> 6) & 0x3F)), *o++ = char(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: return false;
      }
    }
    arena_ = o;
    out = std::string_view(start, size_t(o - start));
    return true;
  }

  const char* buf_ = nullptr;  // followed by a zero byte
  const uint32_t* index_ = nullptr;
  size_t n_ = 0;
  char* arena_ = nullptr;  // decoded strings (never longer than their escaped form)
};

// Known keys compared as 8-byte words instead of byte strings. A key is read in whole words:
// keys lie in a chunk buffer or its arena, both with simdjson's padding (64 bytes) after their
// ends, so the bytes past a key (up to 7) are readable; they are masked off.
class KeyTable {
 public:
  // The first n of `names`.
  KeyTable(const char* const* names, size_t n) {
    for (size_t i = 0; i < n; ++i) {
      std::string_view k = names[i];
      Entry e;
      e.len = uint32_t(k.size());
      e.id = int(i);
      std::memcpy(e.words, k.data(), k.size());  // zero-padded
      size_t at = slot(e.words[0], k.size());
      while (entries_[at].id >= 0) at = (at + 1) % kSlots;
      entries_[at] = e;
    }
  }
  int find(std::string_view k) const {
    const size_t n = k.size();
    if (n == 0 || n > kMaxLen) return -1;
    const uint64_t first = word(k.data(), n);
    for (size_t at = slot(first, n);; at = (at + 1) % kSlots) {
      const Entry& e = entries_[at];
      if (e.id < 0) return -1;
      if (e.len == n && e.words[0] == first && rest_equal(e, k.data(), n)) return e.id;
    }
  }

 private:
  static constexpr size_t kSlots = 128, kMaxLen = 40;  // longest arg key: 33 bytes
  struct Entry {
    uint64_t words[kMaxLen / 8] = {};
    uint32_t len = 0;
    int id = -1;
  };
  // The up to 8 bytes at p of a key with `left` bytes from p on, as a little-endian word with the
  // bytes past the key zeroed.
  static uint64_t word(const char* p, size_t left) {
    uint64_t w;
    if constexpr (std::endian::native == std::endian::little) {
      std::memcpy(&w, p, 8);
      if (left < 8) w &= (uint64_t(1) << (8 * left)) - 1;
    } else {
      w = 0;
      std::memcpy(&w, p, std::min<size_t>(left, 8));
    }
    return w;
  }
  static bool rest_equal(const Entry& e, const char* p, size_t n) {
    for (size_t i = 1; 8 * i < n; ++i)
      if (word(p + 8 * i, n - 8 * i) != e.words[i]) return false;
    return true;
  }
  static size_t slot(uint64_t first, size_t len) { return size_t(((first ^ len) * 0x9E3779B97F4A7C15ull) >> 57) % kSlots; }

  Entry entries_[kSlots];
};
const KeyTable kFastFields(kFieldNames, F_COUNT);
const KeyTable kFastArgs(kArgNames, kArgCount);  // the keys the loaders read

// Field access for one event, with the precise loader's Ev interface and conversion rules;
// where the precise loader would report an error, bad() hands over to it.
class FastEvent {
 public:
  // Reads the event object at token i (moving i past it); false when its JSON is not valid.
  bool read(Tokens& tk, size_t& i) {
    tokens_ = &tk;
    has_ = 0;
    args_object_ = false;
    return tk.object(i, [&](std::string_view key, size_t& j) {
      const int field = kFastFields.find(key);
      if (field < 0) return tk.skip(j, 1);
      has_ |= uint32_t(1) << field;
      return field == F_ARGS ? read_args(tk, j) : tk.value(j, f_[field], 1, true);
    });
  }

  [[noreturn]] void bad(const std::string&) const { throw FastMiss{"an event the precise loader reports"}; }

  bool has(Field f) const { return (has_ >> f) & 1; }
  const Value& at(Field f) const {
    if (!has(f)) bad("");
    return resolved(f_[f]);
  }
  std::string_view str(Field f) const {
    const Value& v = at(f);
    if (v.kind != Kind::String) bad("");
    return v.s;
  }
  std::string_view str_or(Field f, std::string_view d) const { return has(f) ? str(f) : d; }
  int64_t integer(Field f) const {
    int64_t x;
    if (!try_integer(at(f), x)) bad("");
    return x;
  }
  double number(Field f) const {
    const Value& v = at(f);
    double d;
    if (!as_number(v, d) || !std::isfinite(d)) bad("");
    return d;
  }

  bool args() const {
    if (!has(F_ARGS)) return false;
    if (!args_object_) bad("");
    return true;
  }
  bool has_arg(A k) const { return args() && ((a_has_ >> int(k)) & 1); }
  int64_t arg_int(A k, int64_t d) const {
    if (!has_arg(k)) return d;
    const Value& v = resolved(a_[int(k)]);
    if (v.kind == Kind::Null) return d;
    int64_t x;
    if (!try_integer(v, x)) bad("");
    return x;
  }
  int64_t arg_int_req(A k) const {
    if (!has_arg(k)) bad("");
    int64_t x;
    if (!try_integer(resolved(a_[int(k)]), x)) bad("");
    return x;
  }
  std::string_view arg_str(A k, std::string_view d) const {
    if (!has_arg(k)) return d;
    if (a_[int(k)].kind != Kind::String) bad("");
    return a_[int(k)].s;
  }
  bool arg_string(A k, std::string_view& out) const {
    if (!has_arg(k) || a_[int(k)].kind != Kind::String) return false;
    out = a_[int(k)].s;
    return true;
  }
  std::array<uint32_t, 3> arg_dim3(A k) const {
    std::array<uint32_t, 3> r{1, 1, 1};
    if (!has_arg(k)) return r;
    const Value& v = a_[int(k)];
    if (v.kind != Kind::Array || v.count != 3) bad("");
    for (int i = 0; i < 3; ++i) {
      int64_t n;
      if (!try_integer(v.items[i], n) || n < 0 || n > 0xFFFFFFFFll) bad("");
      r[i] = uint32_t(n);
    }
    return r;
  }
  std::vector<std::pair<std::string_view, double>> counter_values() const {
    if (!all_args_ok_) bad("");  // "ph" was given twice: not worth the fast path
    std::map<std::string_view, Scalar> items;  // key order, the last of a repeated key
    for (const auto& [k, v] : all_args_) items[k] = v;
    std::vector<std::pair<std::string_view, double>> out;
    for (const auto& [k, v] : items) {
      double d;
      if (!as_number(v, d)) bad("");
      out.emplace_back(k, d);
    }
    return out;
  }

 private:
  bool read_args(Tokens& tk, size_t& i) {
    args_object_ = tk.ch(i) == '{';
    if (!args_object_) return tk.skip(i, 1);
    a_has_ = 0;
    all_args_.clear();
    // Every arg is kept only for what may be a counter event ("ph" is usually first).
    all_args_ok_ = !has(F_PH) || f_[F_PH].kind != Kind::String || is(f_[F_PH].s, "C");
    return tk.object(i, [&](std::string_view key, size_t& j) {
      const int k = kFastArgs.find(key);
      if (k < 0 && !all_args_ok_) return tk.skip(j, 2);
      Value& dst = k >= 0 ? a_[k] : scratch_;
      if (!tk.value(j, dst, 2, !all_args_ok_)) return false;
      if (k >= 0) a_has_ |= uint64_t(1) << k;
      if (all_args_ok_) all_args_.emplace_back(key, static_cast<const Scalar&>(dst));
      return true;
    });
  }

  // The precise loader's rules: a number is any JSON number; an integer is an integer, an
  // integral double, or a string holding a decimal integer (some traces write ids as strings).
  static bool as_number(const Scalar& v, double& d) {
    switch (v.kind) {
      case Kind::Int64: d = double(v.i); return true;
      case Kind::UInt64: d = double(v.u); return true;
      case Kind::Double: d = v.d; return true;
      default: return false;
    }
  }
  static bool try_integer(const Scalar& v, int64_t& out) {
    switch (v.kind) {
      case Kind::Int64: out = v.i; return true;
      case Kind::UInt64: out = saturated(v.u); return true;
      case Kind::Double:
        if (std::isfinite(v.d) && v.d == std::floor(v.d) && std::fabs(v.d) < 9.2e18) {
          out = int64_t(v.d);
          return true;
        }
        return false;
      case Kind::String: return integer_from_text(v.s, out);
      default: return false;
    }
  }

  // A number read lazily, converted now.
  const Value& resolved(Value& v) const {
    if (v.kind == Kind::Number && !Tokens::convert(v.shape, v)) bad("");
    return v;
  }

  Tokens* tokens_ = nullptr;  // of the event read last
  mutable Value f_[F_COUNT];
  uint32_t has_ = 0;
  bool args_object_ = false;
  mutable Value a_[kArgCount];
  uint64_t a_has_ = 0;
  Value scratch_;
  std::vector<std::pair<std::string_view, Scalar>> all_args_;  // every arg, in order (counters)
  bool all_args_ok_ = false;  // all_args_ holds every arg
};

// ---------------------------------------------------------------- one chunk's results

// Names interned by one chunk, in first-use order. A name first used only by what counts in
// PyTorch traces alone (a counter, read before it is known whether the document is ours) is
// kept apart, so that the merged table has exactly the precise loader's order either way.
class ChunkStrings {
 public:
  struct Entry {
    std::string_view text;
    bool not_ours_only;
  };

  void clear() {
    entries_.clear();
    owned_.clear();
    if (slots_.empty()) slots_.assign(1024, 0);
    else std::fill(slots_.begin(), slots_.end(), 0u);
    insert("", false);  // id 0 is the empty string, as in StringTable
  }
  StrId intern(std::string_view s, bool not_ours_only) {
    const uint64_t h = hash(s);
    if (uint32_t id = find(s, h, false); id != kNone) return id;
    if (not_ours_only)
      if (uint32_t id = find(s, h, true); id != kNone) return id;
    return insert(s, not_ours_only, h);
  }
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  static constexpr uint32_t kNone = 0xFFFFFFFFu;
  static uint64_t hash(std::string_view s) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ s.size();
    size_t i = 0;
    for (; i + 8 <= s.size(); i += 8) {
      uint64_t w;
      std::memcpy(&w, s.data() + i, 8);
      h = (h ^ w) * 0xbf58476d1ce4e5b9ull;
      h ^= h >> 31;
    }
    if (i < s.size()) {
      uint64_t w = 0;
      std::memcpy(&w, s.data() + i, s.size() - i);
      h = (h ^ w) * 0x94d049bb133111ebull;
      h ^= h >> 29;
    }
    return h;
  }
  static uint64_t slot_hash(uint64_t h, bool not_ours_only) { return not_ours_only ? h * 31 + 7 : h; }
  uint32_t find(std::string_view s, uint64_t h, bool not_ours_only) const {
    const size_t mask = slots_.size() - 1;
    for (size_t i = slot_hash(h, not_ours_only) & mask;; i = (i + 1) & mask) {
      uint32_t e = slots_[i];
      if (e == 0) return kNone;
      const Entry& en = entries_[e - 1];
      if (en.not_ours_only == not_ours_only && en.text == s) return e - 1;
    }
  }
  StrId insert(std::string_view s, bool not_ours_only) { return insert(s, not_ours_only, hash(s)); }
  StrId insert(std::string_view s, bool not_ours_only, uint64_t h) {
    if ((entries_.size() + 1) * 2 > slots_.size()) rehash(slots_.size() * 2);
    // A copy: names may be built for the call (counter "name.key").
    entries_.push_back({owned_.emplace_back(s), not_ours_only});
    place(uint32_t(entries_.size()), slot_hash(h, not_ours_only));
    return StrId(entries_.size() - 1);
  }
  void place(uint32_t e, uint64_t h) {
    const size_t mask = slots_.size() - 1;
    size_t i = h & mask;
    while (slots_[i] != 0) i = (i + 1) & mask;
    slots_[i] = e;
  }
  void rehash(size_t n) {
    slots_.assign(n, 0);
    for (size_t e = 0; e < entries_.size(); ++e)
      place(uint32_t(e + 1), slot_hash(hash(entries_[e].text), entries_[e].not_ours_only));
  }

  std::vector<Entry> entries_;
  std::deque<std::string> owned_;  // the entries' text (a deque: elements never move)
  std::vector<uint32_t> slots_;  // entry index + 1; 0 = empty
};

struct MemoryOp {
  Ns ts;
  int64_t bytes;
  uint64_t addr;
  uint16_t dev;
};

// Storage for the chunks' records in mappings of their own: freed, their pages go back to the
// system at once (the heap would keep them), so records copied into the trace and released do
// not stay resident beside it. See place_records.
template <class T>
struct PageAllocator {
  using value_type = T;
  PageAllocator() = default;
  template <class U>
  PageAllocator(const PageAllocator<U>&) {}
  T* allocate(size_t n) {
    void* p = ::mmap(nullptr, n * sizeof(T), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    return static_cast<T*>(p);
  }
  void deallocate(T* p, size_t n) { ::munmap(p, n * sizeof(T)); }
  template <class U>
  bool operator==(const PageAllocator<U>&) const { return true; }
};
template <class T>
using ChunkVector = std::vector<T, PageAllocator<T>>;

// read_event's sink for one chunk. Everything that only counts in PyTorch traces (memory ops,
// process / thread names, counters) is kept here whatever the document is; the merge keeps or
// drops it once that is known. It owns all its text: it outlives the chunk's buffers.
struct ChunkSink {
  ChunkVector<Kernel> kernels;
  ChunkVector<Memcpy> memcpys;
  ChunkVector<Memset> memsets;
  ChunkVector<ApiCall> api_calls;
  ChunkVector<Sync> syncs;
  ChunkVector<NvtxRange> nvtx;
  ChunkVector<CounterSample> counters;
  std::vector<MemoryOp> memory_ops;
  std::vector<Process> processes;
  std::vector<Thread> threads;
  RecordCounts counts;  // load issues with `first` counted from the chunk's first event
  uint64_t skipped = 0;
  uint64_t event = 0;  // index of the event read, in the chunk
  ChunkStrings strings;
  bool not_ours_error = false;  // the precise loader would fail here if the document is not ours
  bool speculating = false;

  void clear() {
    kernels.clear(), memcpys.clear(), memsets.clear(), api_calls.clear(), syncs.clear(), nvtx.clear();
    counters.clear(), memory_ops.clear(), processes.clear(), threads.clear();
    counts = RecordCounts{};
    skipped = 0;
    strings.clear();
    not_ours_error = speculating = false;
  }
  StrId intern(std::string_view s) { return strings.intern(s, speculating); }
  void memory_op(Ns ts, int64_t bytes, uint64_t addr, uint16_t dev) { memory_ops.push_back({ts, bytes, addr, dev}); }
  void process(uint32_t pid, std::string_view name) { processes.push_back({pid, std::string(name)}); }
  void thread(uint32_t pid, uint32_t tid, std::string_view name) { threads.push_back({pid, tid, std::string(name)}); }
  template <class F>
  void speculate_not_ours(F&& f) {
    speculating = true;
    try {
      f();
    } catch (const FastMiss&) {
      not_ours_error = true;
    }
    speculating = false;
  }
};

// Where one chunk's records go in the trace's event vectors (or, summed, how many there are).
struct Parts {
  size_t kernels = 0, memcpys = 0, memsets = 0, api_calls = 0, syncs = 0, nvtx = 0, counters = 0;
};

// What one chunk gave, kept until every chunk is parsed: the merge places each chunk's records
// at offsets that depend on every earlier chunk.
struct ChunkResult {
  size_t seq = 0;
  size_t begin = 0, len = 0;   // its events' bytes in the source
  const char* miss = nullptr;  // why the fast loader gives up here (nullptr: parsed)
  bool array_ended = false;    // "traceEvents" ends inside this chunk ...
  size_t tail_offset = 0;      // ... and the rest of the document starts here (source offset)
  size_t events = 0;
  ChunkSink sink;
  // Set in file order by the merge.
  std::vector<StrId> remap;    // chunk string id -> the trace's
  bool keep_counters = false;  // its counters count (the document is not ours)
};

// One thread's chunk: "[" + events + "]" followed by simdjson's padding, and where its results go.
struct Chunk {
  ChunkResult* result = nullptr;
  std::unique_ptr<char[]> buf;
  std::unique_ptr<char[]> arena;  // unescaped strings (no longer than the bytes of buf)
  size_t capacity = 0;  // bytes in buf and in arena

  char* text() { return buf.get() + 1; }  // the events' bytes (after the added "[")
  void reserve(size_t n) {
    const size_t need = n + 2 + simdjson::SIMDJSON_PADDING;
    if (need <= capacity) return;
    capacity = std::max(need, capacity + capacity / 2);
    buf.reset(new char[capacity]);
    arena.reset(new char[capacity]);
  }
};

// ---------------------------------------------------------------- where the events are

// The top level before "traceEvents", read exactly (it is small); parsed again later by the
// DOM parser, which validates it.
struct Header {
  size_t array_begin = 0;  // the byte after traceEvents' "["
  bool has_base = false;
  Ns base = 0;
  bool block_seen = false;  // a "streamlab" object before the events
};

class HeaderLexer {
 public:
  explicit HeaderLexer(std::string_view s) : s_(s) {}
  // false: not enough bytes, or not a shape the fast loader reads.
  bool run(Header& h) {
    skip_ws();
    if (!eat('{')) return false;
    for (;;) {
      skip_ws();
      std::string_view key;
      if (!string(key)) return false;
      skip_ws();
      if (!eat(':')) return false;
      skip_ws();
      if (i_ >= s_.size()) return false;
      if (key == "traceEvents") {
        if (s_[i_] != '[') return false;
        h.array_begin = i_ + 1;
        return true;
      }
      if (key == "baseTimeNanoseconds") {
        h.has_base = integer(h.base);
        if (!h.has_base) return false;
      } else if (key == "streamlab") {
        h.block_seen = s_[i_] == '{';
      }
      if (!skip_value()) return false;
      skip_ws();
      if (!eat(',')) return false;  // "}" here: no traceEvents (the precise loader says so)
    }
  }

 private:
  void skip_ws() {
    while (i_ < s_.size() && is_ws(s_[i_])) ++i_;
  }
  bool eat(char c) {
    if (i_ >= s_.size() || s_[i_] != c) return false;
    ++i_;
    return true;
  }
  // A key without escapes (escaped top-level keys go to the precise loader).
  bool string(std::string_view& out) {
    if (!eat('"')) return false;
    size_t b = i_;
    while (i_ < s_.size() && s_[i_] != '"') {
      if (s_[i_] == '\\') return false;
      ++i_;
    }
    if (i_ >= s_.size()) return false;
    out = s_.substr(b, i_ - b);
    ++i_;
    return true;
  }
  bool integer(Ns& out) {
    size_t e = i_;
    while (e < s_.size() && !is_ws(s_[e]) && s_[e] != ',' && s_[e] != '}') ++e;
    auto [p, ec] = std::from_chars(s_.data() + i_, s_.data() + e, out);
    return ec == std::errc() && p == s_.data() + e;
  }
  bool skip_string() {
    ++i_;  // the opening quote
    while (i_ < s_.size()) {
      char c = s_[i_++];
      if (c == '\\') ++i_;
      else if (c == '"') return true;
    }
    return false;
  }
  bool skip_value() {
    if (i_ >= s_.size()) return false;
    char c = s_[i_];
    if (c == '"') return skip_string();
    if (c != '{' && c != '[') {
      while (i_ < s_.size() && !is_ws(s_[i_]) && s_[i_] != ',' && s_[i_] != '}' && s_[i_] != ']') ++i_;
      return i_ < s_.size();
    }
    size_t depth = 0;
    while (i_ < s_.size()) {
      c = s_[i_];
      if (c == '"') {
        if (!skip_string()) return false;
        continue;
      }
      ++i_;
      if (c == '{' || c == '[') ++depth;
      else if ((c == '}' || c == ']') && --depth == 0) return true;
    }
    return false;
  }

  std::string_view s_;
  size_t i_ = 0;
};

std::optional<Header> scan_header(const Source& src) {
  std::string buf;
  for (size_t n = std::min<size_t>(src.size(), 64 << 10);; n = std::min(src.size(), n * 4)) {
    buf.resize(n);
    src.read(0, buf.data(), n);
    Header h;
    if (HeaderLexer(buf).run(h)) return h;
    if (n == src.size() || n >= kMaxHeaderBytes) return std::nullopt;
  }
}

// Where a top-level "streamlab" object starts near the end of the file (our writer puts the
// block last): the source offset of the key, or npos.
size_t find_block(const Source& src) {
  const std::string_view key = "\"streamlab\"";
  const size_t size = src.size(), lowest = size > kBlockProbeBytes ? size - kBlockProbeBytes : 0;
  const size_t block = size_t(1) << 20, overlap = 256;
  std::string buf;
  for (size_t end = size; end > lowest;) {
    const size_t begin = end - lowest > block ? end - block : lowest;
    buf.resize(std::min(size, end + overlap) - begin);
    src.read(begin, buf.data(), buf.size());
    for (size_t at = 0;; ++at) {
      const void* hit = memmem(buf.data() + at, buf.size() - at, key.data(), key.size());  // memchr-fast
      if (!hit) break;
      at = size_t(static_cast<const char*>(hit) - buf.data());
      size_t i = at + key.size();
      while (i < buf.size() && is_ws(buf[i])) ++i;
      if (i >= buf.size() || buf[i++] != ':') continue;
      while (i < buf.size() && is_ws(buf[i])) ++i;
      if (i < buf.size() && buf[i] == '{') return begin + at;
    }
    end = begin;
  }
  return std::string::npos;
}

bool probe_block(const Source& src) { return find_block(src) != std::string::npos; }

// Where "traceEvents" ends when our block follows it ("]", ",", the block's key): the offset
// just past the "]", or npos. A guess, for reading the block before the events are parsed.
size_t guess_tail(const Source& src) {
  const size_t key = find_block(src);
  if (key == std::string::npos) return key;
  const size_t from = key > 4096 ? key - 4096 : 0;
  std::string buf(key - from, '\0');
  src.read(from, buf.data(), buf.size());
  size_t i = buf.size();
  auto back_over_ws = [&] {
    while (i > 0 && is_ws(buf[i - 1])) --i;
  };
  back_over_ws();
  if (i == 0 || buf[--i] != ',') return std::string::npos;
  back_over_ws();
  if (i == 0 || buf[i - 1] != ']') return std::string::npos;
  return from + i;
}

// baseTimeNanoseconds near the end (where Kineto writes it); 0 when not found.
Ns probe_base(const Source& src) {
  const size_t n = std::min(src.size(), kBaseProbeBytes);
  std::string buf(n, '\0');
  src.read(src.size() - n, buf.data(), n);
  const std::string_view key = "\"baseTimeNanoseconds\"";
  size_t at = buf.rfind(key);
  if (at == std::string::npos) return 0;
  size_t i = at + key.size();
  while (i < n && is_ws(buf[i])) ++i;
  if (i >= n || buf[i++] != ':') return 0;
  while (i < n && is_ws(buf[i])) ++i;
  Ns base = 0;
  std::from_chars(buf.data() + i, buf.data() + n, base);
  return base;
}

// Where a chunk of events may end: a newline between "," and "{" (raw newlines are never inside
// JSON strings). Returns the comma's index, or npos.
size_t last_event_boundary(const char* p, size_t n) {
  for (size_t end = n; end > 0;) {
    const void* hit = memrchr(p, '\n', end);
    if (!hit) return std::string::npos;
    const size_t nl = size_t(static_cast<const char*>(hit) - p);
    end = nl;
    size_t q = nl + 1;
    while (q < n && is_ws(p[q])) ++q;
    if (q >= n || p[q] != '{') continue;
    size_t b = nl;
    while (b > 0 && is_ws(p[b - 1])) --b;
    if (b > 0 && p[b - 1] == ',') return b - 1;
  }
  return std::string::npos;
}

// Where "traceEvents" may end in bytes without event boundaries: "}", a newline, then "]".
// Returns the index just past the "]", or npos.
size_t array_end_candidate(const char* p, size_t n) {
  for (size_t from = 0; from < n;) {
    const void* hit = std::memchr(p + from, '\n', n - from);
    if (!hit) return std::string::npos;
    const size_t nl = size_t(static_cast<const char*>(hit) - p);
    from = nl + 1;
    size_t q = nl + 1;
    while (q < n && is_ws(p[q])) ++q;
    if (q >= n || p[q] != ']') continue;
    size_t b = nl;
    while (b > 0 && is_ws(p[b - 1])) --b;
    if (b == 0 || p[b - 1] == '}') return q + 1;
  }
  return std::string::npos;
}

// simdjson's stage 1 (the structural index, UTF-8 and string checks) for one thread, its
// buffers reused from chunk to chunk.
class Stage1 {
 public:
  bool run(const char* buf, size_t len) {
    if (!impl_ && simdjson::get_active_implementation()->create_dom_parser_implementation(
                      std::max<size_t>(len, 1 << 16), kMaxDepth, impl_))
      return false;
    if (impl_->capacity() < len && impl_->set_capacity(std::max(len, impl_->capacity() * 3 / 2))) return false;
    return impl_->stage1(reinterpret_cast<const uint8_t*>(buf), len, simdjson::stage1_mode::regular) ==
           simdjson::SUCCESS;
  }
  uint32_t* index() const { return impl_->structural_indexes.get(); }
  size_t count() const { return impl_->n_structural_indexes; }

 private:
  std::unique_ptr<simdjson::internal::dom_parser_implementation> impl_;
};

// ---------------------------------------------------------------- the rest of the document

const char* const kFrameMiss = "the top level or the block has an error the precise loader reports";

// What lies outside "traceEvents" (the top level, deviceProperties, our block), read from the
// document with the events left out. Nothing in it depends on the events, so it can be read
// while they are parsed: its names go into a string table of its own and are interned into the
// trace after the events' names, in their order, which gives the ids of interning them there
// one at a time.
struct Frame {
  size_t tail = std::string::npos;  // the source offset it was read with (just past the events' "]")
  const char* miss = nullptr;       // it does not parse, or its top level has an error
  size_t events_keys = 0;
  Ns base = 0;
  bool ours = false;
  const char* load_miss = nullptr;  // deviceProperties or the block has an error
  Trace part;                       // deviceProperties' devices, and when ours the block's content
  bool counts_given = false;        // the block sets the record counts
};

// The top level, deviceProperties and (when ours) the block, by the precise loader's code.
void read_frame_doc(dom::element doc, const std::string& origin, Frame& f) {
  TopLevel top;
  try {
    top = read_top_level(doc, origin);
    f.events_keys = top.events_keys;
    f.base = base_time_of(top, origin);
    f.ours = has_our_block(top);
  } catch (const sl::Error&) {
    f.miss = kFrameMiss;
    return;
  } catch (const simdjson::simdjson_error&) {
    f.miss = kFrameMiss;
    return;
  }
  try {
    load_device_properties(top, f.part, origin);
    load_distributed_info(top, f.part, origin);
    if (f.ours) {
      const dom::object block = top.block.get_object().value_unsafe();
      f.counts_given = block_has_counts(block);
      load_block(block, f.part, origin);
    }
  } catch (const sl::Error&) {
    f.load_miss = kFrameMiss;
  } catch (const simdjson::simdjson_error&) {
    f.load_miss = kFrameMiss;
  }
}

// The document with "traceEvents" empty: the bytes before its "[", "]", the bytes from `tail` on.
Frame read_frame(const Source& src, const std::string& origin, size_t array_begin, size_t tail_offset) {
  Frame f;
  f.tail = tail_offset;
  const size_t tail = src.size() - tail_offset;
  simdjson::padded_string text(array_begin + 1 + tail);
  src.read(0, text.data(), array_begin);
  text.data()[array_begin] = ']';
  src.read(tail_offset, text.data() + array_begin + 1, tail);
  dom::parser parser;
  dom::element doc;
  if (parser.parse(text).get(doc)) f.miss = "JSON the precise loader reports";
  else read_frame_doc(doc, origin, f);
  return f;
}

template <class T>
void append(std::vector<T>& to, std::vector<T>& from) {
  if (to.empty()) to = std::move(from);
  else to.insert(to.end(), from.begin(), from.end());
}

// The frame's content added to a trace holding the events, as the precise loader adds it after
// them (load_device_properties, load_block).
void add_frame(Frame& f, Trace& t) {
  Trace& p = f.part;
  std::vector<StrId> ids(p.strings.size());
  for (size_t i = 0; i < ids.size(); ++i) ids[i] = t.intern(p.str(StrId(i)));
  for (Stream& s : p.streams) s.name = ids[s.name];
  for (CounterSample& c : p.counters) c.name = ids[c.name];
  append(t.devices, p.devices);
  append(t.contexts, p.contexts);
  append(t.streams, p.streams);
  append(t.processes, p.processes);
  append(t.threads, p.threads);
  append(t.cuda_events, p.cuda_events);
  append(t.allocations, p.allocations);
  append(t.overheads, p.overheads);
  append(t.counters, p.counters);
  // load_block sets these only when given; unset, they hold a fresh trace's values.
  if (p.base_time != kNoTime) t.base_time = p.base_time;
  if (p.session_start_utc_ns != 0) t.session_start_utc_ns = p.session_start_utc_ns;
  for (auto& [k, v] : p.metadata) t.metadata[k] = std::move(v);
  if (p.rank >= 0) t.rank = p.rank;
  if (p.world_size > 0) t.world_size = p.world_size;
  if (f.counts_given) t.counts = counts_with_rejections(std::move(p.counts), t.counts);
}

// ---------------------------------------------------------------- placing the chunks' records

// Calls f(trace vector, chunk vector, offset) as pointers to members, for every event vector
// that chunks fill.
template <class F>
void for_each_part(F&& f) {
  f(&Trace::kernels, &ChunkSink::kernels, &Parts::kernels);
  f(&Trace::memcpys, &ChunkSink::memcpys, &Parts::memcpys);
  f(&Trace::memsets, &ChunkSink::memsets, &Parts::memsets);
  f(&Trace::api_calls, &ChunkSink::api_calls, &Parts::api_calls);
  f(&Trace::syncs, &ChunkSink::syncs, &Parts::syncs);
  f(&Trace::nvtx, &ChunkSink::nvtx, &Parts::nvtx);
  f(&Trace::counters, &ChunkSink::counters, &Parts::counters);
}

// Chunk string ids to the trace's.
void rename(Kernel& k, const StrId* ids) { k.name = ids[k.name]; }
void rename(ApiCall& a, const StrId* ids) { a.name = ids[a.name]; }
void rename(NvtxRange& r, const StrId* ids) { r.name = ids[r.name], r.domain = ids[r.domain]; }
void rename(CounterSample& c, const StrId* ids) { c.name = ids[c.name]; }
template <class T>
void rename(T&, const StrId*) {}

// Appends a chunk's records to the trace's vector (reserved: no reallocation), renamed, and
// releases the chunk's.
template <class T>
void place(ChunkVector<T>& from, std::vector<T>& to, const StrId* ids) {
  for (T r : from) {
    rename(r, ids);
    to.push_back(r);
  }
  ChunkVector<T>().swap(from);
}

// ---------------------------------------------------------------- the loader

// Three phases: the threads parse chunks, each into a result of its own; one short pass in file
// order gives each chunk its string ids and its places in the trace's vectors; the threads copy
// the chunks' records there. Nothing is merged under a lock while others parse.
class FastLoader {
 public:
  FastLoader(const Source& src, const std::string& origin, const JsonLoadOptions& opts, JsonLoadStats* stats)
      : src_(src), origin_(origin), stats_(stats) {
    chunk_bytes_ = opts.chunk_bytes ? opts.chunk_bytes : kDefaultChunkBytes;
    unsigned hw = std::max(1u, std::thread::hardware_concurrency());
    threads_ = opts.threads ? opts.threads : std::min<unsigned>(hw, kMaxThreads);
    // One chunk or two: not worth a thread.
    if (src.size() < 2 * chunk_bytes_) threads_ = 1;
  }

  std::optional<Trace> run() {
    auto t0 = Clock::now();
    // No limit on the file's size: simdjson's (4 GiB) applies to each chunk and to the document
    // without its events, each parsed on its own.
    std::optional<Header> header = scan_header(src_);
    if (!header) return give_up("no \"traceEvents\" array in the top level the fast loader reads");
    EventContext cx;
    cx.base = header->has_base ? header->base : probe_base(src_);
    cx.ours = header->block_seen ? Ours::Yes : Ours::Unknown;
    frame_s_ += seconds_since(t0);

    for (int pass = 0; pass < 2; ++pass) {
      // Our block comes last, and can be large: read it on one thread while the others parse,
      // when it is worth a thread (with one, it is the same work in another order) and the file
      // ends with something other than events (looking for a block in a PyTorch trace's last
      // 64 MiB costs more than its small tail).
      const bool early_frame =
          pass == 0 && threads_ > 1 && !header->block_seen && !tail_contains(src_, "\"ph\"", kTailProbeBytes);
      if (!events_pass(header->array_begin, cx, early_frame)) return give_up(miss_);
      auto t1 = Clock::now();
      std::optional<Trace> t = finish(header->array_begin, cx);
      frame_s_ += seconds_since(t1) - finalize_s_;
      if (t) {
        report(true);
        return t;
      }
      if (miss_) return give_up(miss_);
      if (stats_) stats_->retries++;  // a wrong guess about the tail: again, knowing it
    }
    return give_up("guesses about the tail of the document kept failing");
  }

 private:
  std::nullopt_t give_up(const char* why) {
    report(false);
    if (stats_) stats_->fallback = why;
    return std::nullopt;
  }
  void report(bool fast) {
    if (!stats_) return;
    stats_->fast = fast;
    stats_->threads = threads_;
    stats_->chunks = chunks_;
    stats_->bytes = src_.size();
    stats_->json_events = events_;
    stats_->read_s = read_s_;
    stats_->events_s = events_s_;
    stats_->merge_s = merge_s_;
    stats_->place_s = place_s_;
    stats_->parallel_s = parallel_s_;
    stats_->frame_s = frame_s_;
    stats_->frame_early_s = frame_early_s_;
    stats_->finalize_s = finalize_s_;
  }

  // -------- one pass over the events

  // Reads "traceEvents" into trace_ (and the pending PyTorch-only lists). false: give up.
  bool events_pass(size_t array_begin, EventContext cx, bool early_frame) {
    trace_ = Trace{};
    results_.clear();
    pending_memory_.clear(), pending_processes_.clear(), pending_threads_.clear();
    skipped_ = 0;
    events_ = chunks_ = 0;
    not_ours_error_ = stop_ = false;
    miss_ = nullptr;
    next_pos_ = array_begin;
    next_seq_ = 0;
    chunks_done_ = false;
    ours_ = cx.ours;
    base_ = cx.base;
    totals_ = Parts{};
    placed_ = 0;

    auto t0 = Clock::now();
    std::vector<std::thread> helpers;
    for (unsigned i = 1; i < threads_; ++i) helpers.emplace_back([this] { work(); });
    if (early_frame) read_frame_early(array_begin);
    work();
    for (auto& h : helpers) h.join();
    parallel_s_ += seconds_since(t0);
    if (miss_) return false;
    auto t1 = Clock::now();
    const bool ordered = order_chunks();
    merge_s_ += seconds_since(t1);
    if (!ordered) return false;
    auto t2 = Clock::now();
    try {
      place_records();
    } catch (const std::bad_alloc&) {
      miss_ = "out of memory in the fast loader";
      return false;
    }
    results_.clear();
    place_s_ += seconds_since(t2);
    return true;
  }

  // One thread: take the next chunk and parse it; until the events end.
  void work() {
    Chunk c;
    Stage1 stage1;
    Tokens tokens;
    auto event = std::make_unique<FastEvent>();
    Parts last;  // the previous chunk's record counts: the next one's are much the same
    double read_s = 0, events_s = 0;
    for (;;) {
      auto t0 = Clock::now();
      bool got = false;
      try {
        got = next_chunk(c);
      } catch (const FastMiss& m) {
        stop_with(m.why);
      } catch (...) {
        stop_with("reading the next chunk failed");
      }
      read_s += seconds_since(t0);
      if (!got) break;
      auto t1 = Clock::now();
      parse(stage1, tokens, *event, c, last);
      events_s += seconds_since(t1);
    }
    std::lock_guard<std::mutex> lock(state_mutex_);
    read_s_ += read_s, events_s_ += events_s;
  }

  void stop_with(const char* why) {
    std::lock_guard<std::mutex> lock(state_mutex_);
    if (!miss_) miss_ = why;
    stop_ = true;
  }

  // Reads the next chunk's bytes into c: from next_pos_ to the last event boundary within about
  // chunk_bytes_ (more when there is none), or to the end of the file. Its result gets the next
  // slot of results_ (file order). Only finding the cut is serial: most of the bytes are read
  // after the lock is released, on every thread at once.
  bool next_chunk(Chunk& c) {
    size_t begin = 0, len = 0, have = 0;
    {
      std::lock_guard<std::mutex> lock(read_mutex_);
      if (chunks_done_ || stop_) return false;
      begin = next_pos_;
      size_t next = 0;
      if (!cut_at_probe(c, len, next, have)) cut_reading_all(c, len, next), have = 0;
      results_.push_back(std::make_unique<ChunkResult>());
      ChunkResult& r = *results_.back();
      r.seq = next_seq_++;
      r.begin = begin;
      r.len = len;
      c.result = &r;
      next_pos_ = next;
      chunks_done_ = next >= src_.size();
    }
    src_.read(begin, c.text(), have);  // [have, len) is there already
    c.buf[0] = '[';
    c.text()[len] = ']';
    std::memset(c.text() + len + 1, 0, simdjson::SIMDJSON_PADDING);
    return true;
  }

  // The cut found in the last kCutProbeBytes of a chunk_bytes_ window, reading only those (the
  // chunk's bytes before `have` are left to read), or the file's end within the window (nothing
  // read). false: no event boundary there.
  bool cut_at_probe(Chunk& c, size_t& len, size_t& next, size_t& have) {
    const size_t n = std::min(chunk_bytes_, src_.size() - next_pos_);
    c.reserve(n);
    if (next_pos_ + n == src_.size()) {
      len = have = n, next = src_.size();
      return true;
    }
    const size_t from = n - std::min(n, kCutProbeBytes);
    src_.read(next_pos_ + from, c.text() + from, n - from);
    const size_t cut = last_event_boundary(c.text() + from, n - from);
    if (cut == std::string::npos) return false;
    len = from + cut, next = next_pos_ + len + 1;  // the comma belongs to no chunk
    have = from;
    return true;
  }

  // The cut found reading whole windows, doubled until one holds an event boundary or the end
  // of "traceEvents" (events longer than the probe, or the document's tail). Up to
  // kMaxChunkBytes: a document without newlines between its events (minified JSON) would
  // otherwise be read whole into one chunk; the precise loader takes it (with its own memory
  // check).
  void cut_reading_all(Chunk& c, size_t& len, size_t& next) {
    const size_t size = src_.size();
    for (size_t want = chunk_bytes_;; want *= 2) {
      if (want > kMaxChunkBytes && size - next_pos_ > kMaxChunkBytes)
        throw FastMiss{"no event boundary (a newline between events) within 256 MiB: minified JSON?"};
      const size_t n = std::min(want, size - next_pos_);
      c.reserve(n);
      src_.read(next_pos_, c.text(), n);
      len = n, next = next_pos_ + n;
      if (next == size) return;
      size_t cut = last_event_boundary(c.text(), n);
      if (cut != std::string::npos) {
        len = cut, next = next_pos_ + cut + 1;
        return;
      }
      if ((cut = array_end_candidate(c.text(), n)) != std::string::npos) {
        len = cut, next = size;
        return;
      }
    }
  }

  // Parses chunk c into its result; the result's miss says why not. `last`: the record counts of
  // the thread's previous chunk, reserved for (growing vectors record by record copies them
  // and leaves up to half their capacity unused; all of them are kept until placed).
  void parse(Stage1& stage1, Tokens& tk, FastEvent& ev, Chunk& c, Parts& last) {
    ChunkResult& r = *c.result;
    r.sink.clear();
    for_each_part([&](auto, auto chunk_vec, auto part) { (r.sink.*chunk_vec).reserve(last.*part + last.*part / 8); });
    const EventContext cx{base_, ours_.load()};
    try {
      const size_t len = r.len + 2;  // with our "[" and "]"
      if (!stage1.run(c.buf.get(), len)) throw FastMiss{"JSON the precise loader reports"};
      tk.reset(c.buf.get(), len, stage1.index(), stage1.count(), c.arena.get());
      size_t i = 1;
      if (tk.ch(0) != '[') throw FastMiss{"JSON the precise loader reports"};
      if (tk.ch(i) != ']') {
        for (;;) {
          if (tk.ch(i) != '{' || !ev.read(tk, i)) throw FastMiss{"JSON the precise loader reports"};
          r.sink.event = r.events;
          read_event(ev, r.sink, cx);
          ++r.events;
          const char sep = tk.ch(i);
          if (sep == ']') break;
          if (sep != ',') throw FastMiss{"JSON the precise loader reports"};
          ++i;
        }
      }
      // Our "]" closed the array, or "traceEvents" ended inside the chunk and the rest of the
      // document follows (from the next token on).
      if (tk.pos(i) != len - 1) {
        if (i + 1 >= tk.count()) throw FastMiss{"JSON the precise loader reports"};
        r.array_ended = true;
        r.tail_offset = r.begin + tk.pos(i + 1) - 1;
      } else if (i + 1 != tk.count()) {
        throw FastMiss{"JSON the precise loader reports"};
      }
      // Each chunk after a separating comma holds an event: "[a,,b]" and "[a,]" must not pass.
      if (r.events == 0 && !(r.seq == 0 && r.array_ended)) throw FastMiss{"JSON the precise loader reports"};
    } catch (const FastMiss& m) {
      r.miss = m.why;
    } catch (const std::bad_alloc&) {
      r.miss = "out of memory in the fast loader";
    }
    for_each_part([&](auto, auto chunk_vec, auto part) { last.*part = (r.sink.*chunk_vec).size(); });
    // What comes after a miss or the array's end is not read: the merge stops there.
    if (r.miss || r.array_ended) stop_ = true;
    if (needs_ours(r.sink)) guess_ours_soon();
  }

  // Reads the frame on this thread while the others parse, at the tail guessed from where our
  // block starts; finish() uses it only if the events end there.
  void read_frame_early(size_t array_begin) {
    auto t0 = Clock::now();
    try {
      const size_t tail = guess_tail(src_);
      if (tail != std::string::npos) {
        set_ours_if_unknown(Ours::Yes);  // found as probe_block finds it
        frame_ = read_frame(src_, origin_, array_begin, tail);
      }
    } catch (...) {
      frame_.reset();  // read again in finish(), which reports
    }
    frame_early_s_ += seconds_since(t0);
  }

  // -------- in file order

  // Whether chunk results only count when the document is not ours.
  static bool needs_ours(const ChunkSink& s) {
    const auto& e = s.strings.entries();
    return !s.counters.empty() || std::any_of(e.begin(), e.end(), [](auto& x) { return x.not_ours_only; });
  }

  // Whether the document is ours, guessed from its tail when read_event has not been told.
  bool ours_now() {
    if (ours_.load() == Ours::Unknown) {
      const bool ours = probe_block(src_);
      set_ours_if_unknown(ours ? Ours::Yes : Ours::No);
    }
    return ours_.load() == Ours::Yes;
  }
  // The same guess made by a parsing thread as soon as a chunk needs it, so that later chunks
  // stop reading PyTorch-only events speculatively; the merge makes it again if this fails.
  void guess_ours_soon() {
    if (ours_.load() != Ours::Unknown || !probe_mutex_.try_lock()) return;
    std::lock_guard<std::mutex> lock(probe_mutex_, std::adopt_lock);
    try {
      if (ours_.load() == Ours::Unknown) set_ours_if_unknown(probe_block(src_) ? Ours::Yes : Ours::No);
    } catch (...) {
    }
  }
  void set_ours_if_unknown(Ours o) {
    Ours unknown = Ours::Unknown;
    ours_.compare_exchange_strong(unknown, o);
  }

  // Gives each chunk, in file order, its string ids and its places in the trace's vectors (as if
  // its records were appended), and gathers what is small; up to the chunk where the events end.
  // false: give up (miss_ says why).
  bool order_chunks() {
    for (auto& p : results_) {
      ChunkResult& r = *p;
      if (r.miss) {
        miss_ = r.miss;
        return false;
      }
      intern_names(r);
      for_each_part([&](auto, auto chunk_vec, auto part) { totals_.*part += (r.sink.*chunk_vec).size(); });
      gather(r);
      ++placed_;
      if (r.array_ended) {
        tail_offset_ = r.tail_offset;
        return true;  // later chunks hold the rest of the document, not events
      }
    }
    miss_ = "\"traceEvents\" does not end where the fast loader looks";
    return false;
  }

  // Chunk string ids -> the trace's, interned in the chunk's first-use order. Names of what only
  // counts in PyTorch traces are interned (and counters kept) only when the document is not ours.
  void intern_names(ChunkResult& r) {
    const auto& entries = r.sink.strings.entries();
    r.keep_counters = needs_ours(r.sink) && !ours_now();
    if (!r.keep_counters) r.sink.counters.clear();
    r.remap.resize(entries.size());
    for (size_t i = 0; i < entries.size(); ++i)
      r.remap[i] = !entries[i].not_ours_only || r.keep_counters ? trace_.intern(entries[i].text) : 0;
  }

  // Counts, and the PyTorch-only lists kept until it is known whether the document is ours.
  void gather(ChunkResult& r) {
    ChunkSink& s = r.sink;
    pending_memory_.insert(pending_memory_.end(), s.memory_ops.begin(), s.memory_ops.end());
    for (Process& p : s.processes) pending_processes_.push_back(std::move(p));
    for (Thread& t : s.threads) pending_threads_.push_back(std::move(t));
    for (LoadIssue& i : s.counts.load_issues) i.first += events_;  // chunk -> document index
    trace_.counts += s.counts;
    skipped_ += s.skipped;
    not_ours_error_ |= s.not_ours_error;
    events_ += r.events;
    ++chunks_;
  }

  // -------- placing the records

  // The trace's event vectors reserved (address space only), then filled vector by vector (on
  // several threads) in file order, each chunk's records released as soon as they are copied.
  // The records are so held about once: the peak is the trace model plus the chunks not yet
  // copied, where copying into vectors sized and mapped in advance held the model twice.
  void place_records() {
    std::vector<std::function<void()>> parts;
    for_each_part([&](auto trace_vec, auto chunk_vec, auto part) {
      parts.push_back([this, trace_vec, chunk_vec, n = totals_.*part] {
        auto& to = trace_.*trace_vec;
        to.reserve(n);
        for (size_t i = 0; i < placed_; ++i) place(results_[i]->sink.*chunk_vec, to, results_[i]->remap.data());
      });
    });
    parallel::parallel_for(threads_, parts.size(), [&](size_t i) { parts[i](); });
  }

  // -------- everything but the events

  // The document without its events: parsed by the precise loader's code (or taken from the
  // early read when the events end where it guessed). nullopt with miss_ unset: a guess was
  // wrong, read the events again knowing (cx updated).
  std::optional<Trace> finish(size_t array_begin, EventContext& cx) {
    if (!frame_ || frame_->tail != tail_offset_) frame_ = read_frame(src_, origin_, array_begin, tail_offset_);
    Frame& f = *frame_;
    if (f.miss) return fail_with(f.miss);
    if (f.events_keys != 1) return fail_with("\"traceEvents\" given twice");
    const bool ours_wrong = ours_.load() != Ours::Unknown && (ours_.load() == Ours::Yes) != f.ours;
    if (f.base != cx.base || ours_wrong) {
      cx.base = f.base;
      cx.ours = f.ours ? Ours::Yes : Ours::No;
      return std::nullopt;
    }
    if (!f.ours && not_ours_error_) return fail_with("an event the precise loader reports");
    if (f.load_miss) return fail_with(f.load_miss);
    Trace& t = trace_;
    add_frame(f, t);
    if (!f.ours) {
      for (const MemoryOp& m : pending_memory_) apply_memory_op(t.allocations, m.ts, m.bytes, m.addr, m.dev);
      append(t.processes, pending_processes_);
      append(t.threads, pending_threads_);
      finish_pytorch_trace(t, f.base, skipped_);
    }
    auto t0 = Clock::now();
    t.finalize(threads_);
    finalize_s_ = seconds_since(t0);
    reject_repeated_correlations(t);
    return std::move(t);
  }
  std::nullopt_t fail_with(const char* why) {
    miss_ = why;
    return std::nullopt;
  }

  const Source& src_;
  const std::string& origin_;
  JsonLoadStats* stats_;
  size_t chunk_bytes_ = kDefaultChunkBytes;
  unsigned threads_ = 1;
  std::optional<Frame> frame_;  // read once; kept across passes

  // One pass.
  Trace trace_;
  std::vector<std::unique_ptr<ChunkResult>> results_;  // by seq (file order)
  Parts totals_;
  size_t placed_ = 0;  // chunks whose records go into the trace (up to where the events end)
  std::vector<MemoryOp> pending_memory_;
  std::vector<Process> pending_processes_;
  std::vector<Thread> pending_threads_;
  uint64_t skipped_ = 0;
  size_t events_ = 0, chunks_ = 0;
  bool not_ours_error_ = false;
  std::atomic<Ours> ours_{Ours::Unknown};  // Yes / No: told, or guessed (checked in finish)
  std::mutex probe_mutex_;                 // one thread guesses at a time
  Ns base_ = 0;

  std::mutex read_mutex_;  // chunking; results_ grows under it
  size_t next_pos_ = 0, next_seq_ = 0;
  bool chunks_done_ = false;

  std::mutex state_mutex_;  // guards miss_ while the threads run, and the time sums
  std::atomic<bool> stop_{false};
  const char* miss_ = nullptr;
  size_t tail_offset_ = 0;  // where the document goes on after the events (set by the merge)

  double read_s_ = 0, events_s_ = 0, merge_s_ = 0, place_s_ = 0, parallel_s_ = 0, frame_s_ = 0, frame_early_s_ = 0,
         finalize_s_ = 0;
};

}  // namespace

std::optional<Trace> load_fast(const Source& src, const std::string& origin, const JsonLoadOptions& opts,
                               JsonLoadStats* stats) {
  try {
    return FastLoader(src, origin, opts, stats).run();
  } catch (const std::exception& e) {  // e.g. a read error: the precise loader reports it
    if (stats) stats->fallback = std::string("the fast loader failed: ") + e.what();
    return std::nullopt;
  }
}

}  // namespace sl::prof::trace_io_detail
