// For tests that need a GPU: without one they print a line that ctest's
// SKIP_REGULAR_EXPRESSION turns into "Skipped", with the reason, instead of passing silently.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "core/cuda/runtime.h"

namespace keel::testing {
// KEEL_TEST_REDUCED=1 (set by tests/gpu/check.sh under compute-sanitizer, which slows kernels
// 10-100x): GPU tests keep every code path but skip their largest shapes.
inline bool reduced_sizes() {
  const char* v = std::getenv("KEEL_TEST_REDUCED");
  return v && *v && std::strcmp(v, "0") != 0;
}
}  // namespace keel::testing

#define KEEL_REQUIRE_CUDA()                                                                        \
  do {                                                                                             \
    if (!::keel::cuda::is_available()) {                                                           \
      std::printf("KEEL_SKIP: no CUDA device here (keel built %s CUDA); this GPU test did not run\n", \
                  ::keel::cuda::built_with_cuda() ? "with" : "without");                           \
      return;                                                                                      \
    }                                                                                              \
  } while (0)
