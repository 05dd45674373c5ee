// CLI11 validators for numeric options. CLI::Range alone lets NaN through (every comparison with
// NaN is false) and says nothing of infinities, so a threshold given as "nan" or "-inf" would
// quietly switch a check off or print impossible figures; these reject them with the option's
// name and the range.
#pragma once
#include <cmath>
#include <sstream>
#include <string>

#include <CLI/CLI.hpp>

namespace sl::cli {

// A finite number in [lo, hi] (lo excluded when lo_open: e.g. a timeout of 0 s).
inline CLI::Validator finite_in(double lo, double hi, bool lo_open = false) {
  std::ostringstream os;
  os << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
  const std::string range = os.str(), desc = "finite, in " + range;
  return CLI::Validator(
      [=](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
        if (!std::isfinite(v)) return "'" + s + "' is not a finite number";
        if (v < lo || v > hi || (lo_open && v == lo)) return s + " is outside " + range;
        return std::string();
      },
      desc);
}

}  // namespace sl::cli
