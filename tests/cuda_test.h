// For tests that need a GPU: without one they print a line that ctest's
// SKIP_REGULAR_EXPRESSION turns into "Skipped", with the reason, instead of passing silently.
#pragma once

#include <cstdio>

#include "core/cuda/runtime.h"

#define KEEL_REQUIRE_CUDA()                                                                        \
  do {                                                                                             \
    if (!::keel::cuda::is_available()) {                                                           \
      std::printf("KEEL_SKIP: no CUDA device here (keel built %s CUDA); this GPU test did not run\n", \
                  ::keel::cuda::built_with_cuda() ? "with" : "without");                           \
      return;                                                                                      \
    }                                                                                              \
  } while (0)
