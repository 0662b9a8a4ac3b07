// Where a tensor lives: the CPU, or one CUDA device by index.
#pragma once

#include <string>

namespace keel {

enum class DeviceType : uint8_t { CPU, CUDA };

struct Device {
  DeviceType type = DeviceType::CPU;
  int index = 0;

  static Device cpu() { return {DeviceType::CPU, 0}; }
  static Device cuda(int index = 0) { return {DeviceType::CUDA, index}; }
  bool is_cpu() const { return type == DeviceType::CPU; }
  bool is_cuda() const { return type == DeviceType::CUDA; }
  std::string str() const { return is_cpu() ? "cpu" : "cuda:" + std::to_string(index); }
  bool operator==(const Device&) const = default;
};

// Parses "cpu", "cuda", "cuda:1"; throws ValueError otherwise.
Device parse_device(const std::string& s);

}  // namespace keel
