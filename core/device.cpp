#include "core/device.h"

#include "core/error.h"

namespace keel {

Device parse_device(const std::string& s) {
  if (s == "cpu") return Device::cpu();
  if (s == "cuda") return Device::cuda(0);
  if (s.rfind("cuda:", 0) == 0) {
    try {
      size_t used = 0;
      int index = std::stoi(s.substr(5), &used);
      if (used == s.size() - 5 && index >= 0) return Device::cuda(index);
    } catch (const std::exception&) {
    }
  }
  throw ValueError("parse_device", "unknown device '" + s + "'", "use cpu, cuda or cuda:N");
}

}  // namespace keel
