#include "model/speculative.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <sstream>

#include "core/error.h"
#include "core/rng.h"

namespace sl {

namespace {

constexpr const char* kForms = "expected greedy, N (a count >= 0) or rate:R[:SEED] (0 <= R <= 1)";

// Whole-string integer / number parses in decimal: "3x", "" and " 2" are errors, not 3, 0 and 2,
// and "0x1p-1" is not 0.5 (strtod reads hex floats).
bool decimal_text(const std::string& s) {
  return !s.empty() && s.find_first_not_of("0123456789+-.eE") == std::string::npos;
}
bool parse_int(const std::string& s, long long& v) {
  if (!decimal_text(s)) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtoll(s.c_str(), &end, 10);
  return errno == 0 && end == s.c_str() + s.size();
}

bool parse_double(const std::string& s, double& v) {
  if (!decimal_text(s)) return false;
  char* end = nullptr;
  errno = 0;
  v = std::strtod(s.c_str(), &end);
  return errno == 0 && end == s.c_str() + s.size();
}

}  // namespace

AcceptRule parse_accept_rule(const std::string& text) {
  AcceptRule r;
  if (text == "greedy") return r;
  long long n = 0;
  if (parse_int(text, n)) {
    SL_CHECK(n >= 0 && n <= 1000000, "--accept ", text, ": a count must be >= 0 (", kForms, ")");
    r.kind = AcceptRule::Kind::Count;
    r.count = int(n);
    return r;
  }
  SL_CHECK(text.rfind("rate:", 0) == 0, "--accept ", text, ": ", kForms);
  const std::string rest = text.substr(5);
  const size_t colon = rest.find(':');
  const std::string rate = rest.substr(0, colon);
  r.kind = AcceptRule::Kind::Rate;
  SL_CHECK(parse_double(rate, r.rate) && r.rate >= 0.0 && r.rate <= 1.0, "--accept ", text, ": rate '", rate,
           "' is not a number in [0, 1] (", kForms, ")");
  if (colon != std::string::npos) {
    const std::string seed = rest.substr(colon + 1);
    long long sv = 0;
    SL_CHECK(parse_int(seed, sv) && sv >= 0, "--accept ", text, ": seed '", seed, "' is not an integer >= 0 (", kForms,
             ")");
    r.seed = uint64_t(sv);
  }
  return r;
}

std::string accept_rule_str(const AcceptRule& r) {
  switch (r.kind) {
    case AcceptRule::Kind::Greedy: return "greedy";
    case AcceptRule::Kind::Count: return std::to_string(r.count);
    case AcceptRule::Kind::Rate: {
      std::ostringstream os;
      os << "rate:" << r.rate << ":" << r.seed;
      return os.str();
    }
  }
  return "?";
}

std::vector<int32_t> forced_accept_counts(const AcceptRule& r, int batch, int k, uint64_t step) {
  std::vector<int32_t> out(size_t(std::max(batch, 0)), -1);
  if (r.kind == AcceptRule::Kind::Greedy) return out;
  for (int b = 0; b < batch; ++b) {
    if (r.kind == AcceptRule::Kind::Count) {
      out[size_t(b)] = std::min(r.count, k);
      continue;
    }
    // Counter-based draws (core/rng.h): draft i of sequence b in step `step`. A uniform in
    // [0, 1) from the top 53 bits; accepted while below the rate.
    int a = 0;
    while (a < k) {
      const uint64_t i = (step * uint64_t(batch) + uint64_t(b)) * uint64_t(k) + uint64_t(a);
      const double u = double(splitmix64(r.seed ^ splitmix64(hash_name("accept") ^ splitmix64(i))) >> 11) * 0x1p-53;
      if (!(u < r.rate)) break;
      ++a;
    }
    out[size_t(b)] = a;
  }
  return out;
}

}  // namespace sl
