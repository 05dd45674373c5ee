#include "ui/kernel_names.h"

namespace sl::ui {

std::string short_kernel_name(std::string_view s) {
  const bool signature = s.find("::") != std::string_view::npos || s.find('<') != std::string_view::npos ||
                         s.substr(0, 5) == "void ";
  if (!signature) return std::string(s);
  // Cut the parameter list: the first '(' outside template brackets that does not open
  // "(anonymous namespace)".
  int depth = 0;
  size_t end = s.size();
  for (size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '<') ++depth;
    else if (c == '>' && depth > 0) --depth;
    else if (c == '(' && depth == 0) {
      if (s.substr(i, 21) == "(anonymous namespace)") {
        i += 20;
        continue;
      }
      end = i;
      break;
    }
  }
  std::string_view head = s.substr(0, end);
  // Drop template arguments at depth 0 (keep what precedes them).
  std::string plain;
  depth = 0;
  for (char c : head) {
    if (c == '<') ++depth;
    else if (c == '>' && depth > 0) --depth;
    else if (depth == 0) plain += c;
  }
  // The return type ends at the last space outside "(anonymous namespace)"; the scope at "::".
  size_t cut = 0;
  for (size_t i = 0; i < plain.size(); ++i) {
    if (plain.compare(i, 21, "(anonymous namespace)") == 0) {
      i += 20;
      continue;
    }
    if (plain[i] == ' ') cut = i + 1;
  }
  std::string name = plain.substr(cut);
  const size_t scope = name.rfind("::");
  if (scope != std::string::npos) name = name.substr(scope + 2);
  while (!name.empty() && name.back() == ' ') name.pop_back();
  return name.empty() ? std::string(s) : name;
}

}  // namespace sl::ui
