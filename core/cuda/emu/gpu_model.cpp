// The emulated GPUs' published limits (NVIDIA's H100 SXM, H200 and A100 80GB data sheets, and
// the CUDA programming guide's table of compute capabilities 8.0 and 9.0: 48 KB of shared memory
// per block without the opt-in, 227 KB with it on 9.0, 163 KB on 8.0).
#include "core/cuda/emu/gpu_model.h"

#include <cstdlib>
#include <cstring>

#include "core/error.h"

namespace keel::emu {

namespace {
GpuModel h100() {
  GpuModel m;
  m.name = "NVIDIA H100 80GB HBM3 (keel emulated on the CPU)";
  m.major = 9, m.minor = 0;
  m.multiprocessors = 132;
  m.shared_per_block_optin = 227 << 10;
  m.shared_per_multiprocessor = 228 << 10;
  m.memory_bytes = size_t(80) << 30;
  m.l2_bytes = size_t(50) << 20;
  return m;
}
GpuModel h200() {
  GpuModel m = h100();
  m.name = "NVIDIA H200 (keel emulated on the CPU)";
  m.memory_bytes = size_t(141) << 30;
  return m;
}
GpuModel a100() {
  GpuModel m;
  m.name = "NVIDIA A100-SXM4-80GB (keel emulated on the CPU)";
  m.major = 8, m.minor = 0;
  m.multiprocessors = 108;
  m.shared_per_block_optin = 163 << 10;
  m.shared_per_multiprocessor = 164 << 10;
  m.memory_bytes = size_t(80) << 30;
  m.l2_bytes = size_t(40) << 20;
  return m;
}

long env_int(const char* name, long lo, long hi, long fallback) {
  const char* v = std::getenv(name);
  if (!v || !*v) return fallback;
  char* end = nullptr;
  const long n = std::strtol(v, &end, 10);
  if (*end || n < lo || n > hi)
    throw ConfigError("emulated CUDA", std::string(name) + "=" + v + " is not a whole number in [" + std::to_string(lo) +
                                           ", " + std::to_string(hi) + "]");
  return n;
}

// CUDA_VISIBLE_DEVICES as the CUDA runtime reads it: the devices listed, up to the first entry
// that is not one of them; set but empty (or "-1") hides every device, the usual way to run a
// CUDA program on the CPU alone.
int visible_devices(int devices) {
  const char* v = std::getenv("CUDA_VISIBLE_DEVICES");
  if (!v) return devices;
  int visible = 0;
  for (const char* p = v; *p;) {
    char* end = nullptr;
    const long n = std::strtol(p, &end, 10);
    if (end == p || n < 0 || n >= devices || (*end && *end != ',')) break;
    ++visible;
    p = *end ? end + 1 : end;
  }
  return visible;
}

GpuModel from_environment() {
  const char* which = std::getenv("KEEL_EMU_GPU");
  GpuModel m;
  if (!which || !*which || std::strcmp(which, "h100") == 0 || std::strcmp(which, "H100") == 0) m = h100();
  else if (std::strcmp(which, "h200") == 0 || std::strcmp(which, "H200") == 0) m = h200();
  else if (std::strcmp(which, "a100") == 0 || std::strcmp(which, "A100") == 0) m = a100();
  else
    throw ConfigError("emulated CUDA", std::string("KEEL_EMU_GPU=") + which + " names no GPU keel can emulate",
                      "use h100 (the default), h200 or a100");
  m.devices = visible_devices(static_cast<int>(env_int("KEEL_EMU_DEVICES", 1, 8, 1)));
  const long mb = env_int("KEEL_EMU_MEMORY_MB", 1, 1L << 24, 0);
  if (mb) m.memory_bytes = size_t(mb) << 20;
  return m;
}
}  // namespace

const GpuModel& gpu_model() {
  static const GpuModel model = from_environment();
  return model;
}

}  // namespace keel::emu
