// Checks of option values that CLI11 lets through. CLI::Range alone lets NaN through (every
// comparison with NaN is false) and says nothing of infinities, so a threshold given as "nan" or
// "-inf" would quietly switch a check off or print impossible figures; a seed past 2^64 - 1 is
// clamped; an empty number reads as 0; a whole number with a leading zero reads as octal ("010"
// is 8 steps) and "0x10" as hex. These reject or normalise them with the option's name.
#pragma once
#include <cctype>
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

// `v` without the blanks around it (CLI11 passes " 5" on as it was typed).
inline std::string without_blanks(const std::string& v) {
  const size_t b = v.find_first_not_of(" \t"), e = v.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : v.substr(b, e - b + 1);
}

// The text of a whole number, made plain decimal in place: surrounding blanks dropped and leading
// zeros removed, so that CLI11 cannot read "010" as octal 8; "0x10", "1e3" or "1_000" refused.
inline std::string decimal_whole_number(std::string& v) {
  std::string t = without_blanks(v);
  std::string sign;
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) sign = t.substr(0, 1), t.erase(0, 1);
  if (t.empty() || t.find_first_not_of("0123456789") != std::string::npos)
    return "'" + v + "' is not a whole number in decimal digits";
  const size_t nz = t.find_first_not_of('0');
  v = (sign == "-" ? sign : std::string()) + (nz == std::string::npos ? std::string("0") : t.substr(nz));
  return std::string();
}

// The text of a real number in decimal notation (digits, a point, an exponent) or inf / nan (which
// the option's own range check then names): CLI11 would read "0x1p3" as 8.
inline std::string decimal_real_number(const std::string& v) {
  std::string t = without_blanks(v);
  if (!t.empty() && (t[0] == '+' || t[0] == '-')) t.erase(0, 1);
  std::string lower;
  for (char c : t) lower += char(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "inf" || lower == "infinity" || lower == "nan") return std::string();
  size_t i = 0, mantissa_digits = 0;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++mantissa_digits;
  if (i < t.size() && t[i] == '.') ++i;
  while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++mantissa_digits;
  bool ok = mantissa_digits > 0;
  if (ok && i < t.size() && (t[i] == 'e' || t[i] == 'E')) {
    ++i;
    if (i < t.size() && (t[i] == '+' || t[i] == '-')) ++i;
    size_t exp_digits = 0;
    while (i < t.size() && std::isdigit(static_cast<unsigned char>(t[i]))) ++i, ++exp_digits;
    ok = exp_digits > 0;
  }
  if (!ok || i != t.size()) return "'" + v + "' is not a number in decimal notation";
  return std::string();
}

// CLI11 reads an empty value of a number option ("--steps ''", "--batch=") as 0, and an empty file
// name as the option not given, so an empty shell variable would run zero steps or write no trace
// without a word. Every option of `app` and its subcommands whose value is a number, or names a
// file or folder, refuses an empty value (other text keeps it: an empty --kernel-variants means
// the defaults), and a number's text is checked for decimal form (above). These run before the
// option's own checks (CLI11's transform puts them first), so an empty or hex value is named as
// such rather than as out of range.
inline void refuse_empty_values(CLI::App& app) {
  static const char* const kPathOptions[] = {"--config",   "--checkpoint",  "--tokens", "--dump-logits",
                                             "--dump-decode-logits",        "--save-checkpoint", "--trace",
                                             "--sqlite",   "--screenshot",  "--out",    "--out-dir",
                                             "--recorded", "--resume"};
  for (CLI::Option* opt : app.get_options()) {
    if (opt->get_expected_max() == 0) continue;  // a flag
    // The option's own type: get_type_name() appends each check's description ("INT:INT in [1 - 8]").
    const std::string full = opt->get_type_name(), t = full.substr(0, full.find(':'));
    const bool whole = t == "INT" || t == "UINT", real = t == "FLOAT" || t == "NUMBER";
    bool path = false;
    for (const char* name : kPathOptions) path = path || opt->check_lname(name + 2);
    if (!whole && !real && !path) continue;
    opt->transform(CLI::Validator(
        [whole, real](std::string& v) {
          if (v.empty()) return std::string("an empty value is not allowed");
          if (whole) return decimal_whole_number(v);
          if (real) return decimal_real_number(v);
          return std::string();
        },
        "", "non-empty"));
  }
  for (CLI::App* sub : app.get_subcommands([](CLI::App*) { return true; })) refuse_empty_values(*sub);
}

}  // namespace sl::cli
