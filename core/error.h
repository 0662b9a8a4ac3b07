// Typed exceptions for every layer of keel.
//
// Library code throws; only `main` turns an exception into a message and an exit code.
// Each error names the operation that failed, says what was wrong (with the shapes or
// values involved), and gives a hint on what to do. what() renders all three:
//
//   keel::ShapeError in matmul: inner dimensions differ: a is [2, 3], b is [4, 5]
//     hint: a's last dimension must equal b's second-to-last
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace keel {

class Error : public std::runtime_error {
 public:
  Error(std::string kind, std::string op, std::string message, std::string hint = {});

  const std::string& kind() const { return kind_; }
  const std::string& op() const { return op_; }
  const std::string& message() const { return message_; }
  const std::string& hint() const { return hint_; }

 private:
  std::string kind_, op_, message_, hint_;
};

#define KEEL_DEFINE_ERROR(Name)                                                    \
  class Name : public Error {                                                      \
   public:                                                                         \
    Name(std::string op, std::string message, std::string hint = {})               \
        : Error(#Name, std::move(op), std::move(message), std::move(hint)) {}      \
  };

KEEL_DEFINE_ERROR(ShapeError)     // shapes that do not fit together
KEEL_DEFINE_ERROR(DTypeError)     // an unsupported or mismatched element type
KEEL_DEFINE_ERROR(DeviceError)    // mixed devices, a missing device, no kernel for a device
KEEL_DEFINE_ERROR(IndexError)     // an index or dimension out of range
KEEL_DEFINE_ERROR(ValueError)     // a value out of its domain (negative window, p outside [0,1))
KEEL_DEFINE_ERROR(IoError)        // a missing, unreadable, corrupt or truncated file
KEEL_DEFINE_ERROR(ConfigError)    // a configuration that cannot work
KEEL_DEFINE_ERROR(CudaError)      // a failed CUDA, cuBLAS or NCCL call
KEEL_DEFINE_ERROR(AutogradError)  // misuse of backward(): freed graph, non-scalar loss, ...
KEEL_DEFINE_ERROR(OutOfMemoryError)  // an allocation the device could not satisfy

#undef KEEL_DEFINE_ERROR

// "[2, 3, 4]": how every error message prints a shape.
std::string shape_str(const std::vector<int64_t>& shape);

}  // namespace keel
