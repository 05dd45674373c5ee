// Checks of option values that CLI11 lets through. CLI::Range alone lets NaN through (every
// comparison with NaN is false) and says nothing of infinities, so a threshold given as "nan" or
// "-inf" would quietly switch a check off or print impossible figures; a seed past 2^64 - 1 is
// clamped; an empty number reads as 0. These reject them with the option's name.
#pragma once
#include <cerrno>
#include <cmath>
#include <cstdlib>
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

// A whole number in 0..2^64-1 given as digits only: an unsigned option would wrap -1 to 2^64 - 1,
// and CLI11 clamps a value past 2^64 - 1 to it, both silently (checked on the text).
inline CLI::Validator whole_uint64() {
  return CLI::Validator(
      [](std::string& v) -> std::string {
        if (v.empty() || v.find_first_not_of("0123456789") != std::string::npos)
          return "must be a whole number >= 0, not '" + v + "'";
        errno = 0;
        (void)std::strtoull(v.c_str(), nullptr, 10);
        if (errno == ERANGE) return v + " is past the largest seed, 18446744073709551615";
        return std::string();
      },
      "");
}

// CLI11 reads an empty value of a number option ("--steps ''", "--batch=") as 0, and an empty file
// name as the option not given, so an empty shell variable would run zero steps or write no trace
// without a word. Every option of `app` and its subcommands whose value is a number, or names a
// file or folder, refuses an empty value (other text keeps it: an empty --kernel-variants means
// the defaults).
inline void refuse_empty_values(CLI::App& app) {
  static const char* const kPathOptions[] = {"--config",   "--checkpoint",  "--tokens", "--dump-logits",
                                             "--dump-decode-logits",        "--save-checkpoint", "--trace",
                                             "--sqlite",   "--screenshot",  "--out",    "--out-dir",
                                             "--recorded", "--resume"};
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_max() == 0) continue;  // a flag
    const std::string t = opt->get_type_name();
    bool refuse = t == "INT" || t == "UINT" || t == "FLOAT" || t == "NUMBER";
    for (const char* name : kPathOptions) refuse = refuse || opt->check_lname(name + 2);
    if (!refuse) continue;
    opt->check(CLI::Validator(
        [](std::string& v) { return v.empty() ? std::string("an empty value is not allowed") : std::string(); }, "",
        "non-empty"));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_values(*sub);
}

}  // namespace sl::cli
