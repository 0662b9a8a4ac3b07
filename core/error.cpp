#include "core/error.h"

namespace keel {

namespace {
std::string render(const std::string& kind, const std::string& op, const std::string& message,
                   const std::string& hint) {
  std::string s = "keel::" + kind;
  if (!op.empty()) s += " in " + op;
  s += ": " + message;
  if (!hint.empty()) s += "\n  hint: " + hint;
  return s;
}
}  // namespace

Error::Error(std::string kind, std::string op, std::string message, std::string hint)
    : std::runtime_error(render(kind, op, message, hint)),
      kind_(std::move(kind)),
      op_(std::move(op)),
      message_(std::move(message)),
      hint_(std::move(hint)) {}

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

}  // namespace keel
