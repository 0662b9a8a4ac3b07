// The GPU the emulator pretends to be. Its limits are the ones launches are checked against and
// the ones keel's host code reads (multiprocessor count, shared memory per block), so that code
// which sizes its grids from them takes the same paths as on the real GPU.
//
//   KEEL_EMU_GPU=h100 (default) | h200 | a100   which GPU's limits to emulate
//   KEEL_EMU_DEVICES=N                     how many such devices (default 1, at most 8)
//   KEEL_EMU_MEMORY_MB=N                   device memory per device (default the GPU's own)
#pragma once

#include <cstddef>
#include <string>

namespace keel::emu {

struct GpuModel {
  std::string name;
  int major = 0, minor = 0;  // compute capability
  int multiprocessors = 0;
  size_t shared_per_block = 48 << 10;  // without cudaFuncSetAttribute
  size_t shared_per_block_optin = 0;   // the most cudaFuncSetAttribute may allow
  size_t shared_per_multiprocessor = 0;
  size_t memory_bytes = 0;
  size_t l2_bytes = 0;
  int devices = 1;
};

// The model chosen by the environment, read once; throws ConfigError for a value it does not know.
const GpuModel& gpu_model();

}  // namespace keel::emu
