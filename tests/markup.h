// Checks on the HTML and SVG that keel writes (reports, the lab page, attention maps).
#pragma once

#include <regex>
#include <string>
#include <vector>

namespace keel::test {

// Every tag opened is closed in order (or self-closed): enough to catch a broken document.
inline bool well_formed(const std::string& xml) {
  std::vector<std::string> stack;
  static const std::regex tag(R"(<(/?)([A-Za-z][\w-]*)[^>]*?(/?)>)");
  for (auto it = std::sregex_iterator(xml.begin(), xml.end(), tag); it != std::sregex_iterator(); ++it) {
    const auto& m = *it;
    if (m[3].length() || m[2] == "meta") continue;  // <x/>, and HTML's void <meta>
    if (!m[1].length()) {
      stack.push_back(m[2]);
    } else {
      if (stack.empty() || stack.back() != m[2]) return false;
      stack.pop_back();
    }
  }
  return stack.empty();
}

}  // namespace keel::test
