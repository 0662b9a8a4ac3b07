// Small checks the op tests share: bit-for-bit equality of tensors, and whether a call throws a
// keel error whose message names something.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"

namespace keel::testing {

// t (any) -> the bytes of its values in logical order: equal iff every element has the same bits.
inline std::vector<unsigned char> bits(const Tensor& t) {
  Tensor c = t.detach().contiguous();
  std::vector<unsigned char> b(static_cast<size_t>(c.numel()) * dtype_size(c.dtype()));
  if (!b.empty()) std::memcpy(b.data(), c.raw_data(), b.size());  // an empty tensor has no data
  return b;
}

// Whether fn() throws a keel::Error whose message contains `what`.
template <typename Fn>
bool message_has(Fn&& fn, const char* what) {
  try {
    fn();
  } catch (const Error& e) {
    return std::string(e.what()).find(what) != std::string::npos;
  }
  return false;
}

}  // namespace keel::testing
