// The CUDA runtime API on the emulated GPU: the functions keel calls, with the signatures of
// CUDA's own cuda_runtime_api.h (so a mismatch does not compile) and CUDA's error codes.
//
// Device memory is host memory: a device pointer can be read on the host (a debugger prints
// it), and AddressSanitizer sees every device buffer. Fresh allocations are filled with 0xff
// bytes, a NaN in every float type, so an output a kernel forgot to write shows. Kernels run
// to completion inside the launch, so every stream is always idle: "asynchronous" copies and
// memsets are done when they return, events complete when recorded, and the order keel
// relies on holds trivially. Events still time host work (cudaEventElapsedTime). While a
// stream captures a graph (graph.cpp), what would run on it is recorded instead, and what a
// capture forbids (a host wait, cudaMalloc, a synchronous copy) fails as on a GPU.
#include <cuda_runtime.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <string>

#include <fmt/format.h>

#include "core/cuda/emu/block.h"
#include "core/cuda/emu/gpu_model.h"
#include "core/cuda/emu/graph.h"

struct CUstream_st {
  int device;
  unsigned flags;
};
struct CUevent_st {
  std::chrono::steady_clock::time_point at{};
  bool recorded = false;
};

namespace {

struct Runtime {
  std::mutex mu;
  std::list<CUstream_st> streams;  // owned here, as a driver owns them: reachable until destroyed
  std::list<CUevent_st> events;
  std::map<const void*, size_t> allocations;  // device pointer -> bytes
  std::map<int, size_t> used;                 // device -> bytes allocated
};
Runtime& rt() {
  static Runtime* r = new Runtime;  // never destroyed: frees may come from static destructors
  return *r;
}

thread_local int t_device = 0;
thread_local cudaError_t t_last = cudaSuccess;
// The most recent error and what broke, which cudaGetErrorString adds to CUDA's words for that
// code (keel reads the code with cudaGetLastError first, which clears t_last but not these).
thread_local cudaError_t t_recent = cudaSuccess;
thread_local std::string t_recent_detail;

cudaError_t record(cudaError_t err, std::string detail = {}) {
  if (err != cudaSuccess) {
    t_last = t_recent = err;
    t_recent_detail = std::move(detail);
  }
  return err;
}

int device_count() { return keel::emu::gpu_model().devices; }

}  // namespace

namespace keel::emu {
cudaError_t set_error(cudaError_t err, std::string detail) { return record(err, std::move(detail)); }
}  // namespace keel::emu

using keel::emu::capture_forbids;
using keel::emu::is_capturing;

// ---- devices ----
cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return *count == 0 ? record(cudaErrorNoDevice) : cudaSuccess;  // as the runtime answers with none visible
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count())
    return record(cudaErrorInvalidDevice, fmt::format("device {} of {}", device, device_count()));
  t_device = device;
  return cudaSuccess;
}
cudaError_t cudaGetDevice(int* device) {
  *device = t_device;
  return cudaSuccess;
}
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int device) {
  if (device < 0 || device >= device_count()) return record(cudaErrorInvalidDevice);
  const keel::emu::GpuModel& m = keel::emu::gpu_model();
  *p = cudaDeviceProp{};
  std::snprintf(p->name, sizeof p->name, "%s", m.name.c_str());
  p->totalGlobalMem = m.memory_bytes;
  p->sharedMemPerBlock = m.shared_per_block;
  p->sharedMemPerBlockOptin = m.shared_per_block_optin;
  p->sharedMemPerMultiprocessor = m.shared_per_multiprocessor;
  p->regsPerBlock = p->regsPerMultiprocessor = 65536;
  p->warpSize = 32;
  p->maxThreadsPerBlock = 1024;
  p->maxThreadsPerMultiProcessor = 2048;
  p->maxThreadsDim[0] = 1024, p->maxThreadsDim[1] = 1024, p->maxThreadsDim[2] = 64;
  p->maxGridSize[0] = 2147483647, p->maxGridSize[1] = 65535, p->maxGridSize[2] = 65535;
  p->major = m.major, p->minor = m.minor;
  p->multiProcessorCount = m.multiprocessors;
  p->l2CacheSize = static_cast<int>(m.l2_bytes);
  p->totalConstMem = 64 << 10;
  return cudaSuccess;
}
cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= device_count()) return record(cudaErrorInvalidDevice);
  const keel::emu::GpuModel& m = keel::emu::gpu_model();
  switch (attr) {
    case cudaDevAttrMultiProcessorCount: *value = m.multiprocessors; break;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = static_cast<int>(m.shared_per_block); break;
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = static_cast<int>(m.shared_per_block_optin); break;
    case cudaDevAttrMaxSharedMemoryPerMultiprocessor: *value = static_cast<int>(m.shared_per_multiprocessor); break;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; break;
    case cudaDevAttrWarpSize: *value = 32; break;
    case cudaDevAttrComputeCapabilityMajor: *value = m.major; break;
    case cudaDevAttrComputeCapabilityMinor: *value = m.minor; break;
    case cudaDevAttrMaxGridDimX: *value = 2147483647; break;
    case cudaDevAttrMaxGridDimY: case cudaDevAttrMaxGridDimZ: *value = 65535; break;
    case cudaDevAttrMaxBlockDimX: case cudaDevAttrMaxBlockDimY: *value = 1024; break;
    case cudaDevAttrMaxBlockDimZ: *value = 64; break;
    case cudaDevAttrL2CacheSize: *value = static_cast<int>(m.l2_bytes); break;
    default: return record(cudaErrorInvalidValue, fmt::format("device attribute {} is not emulated", int(attr)));
  }
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize() { return capture_forbids(nullptr, "cudaDeviceSynchronize"); }
cudaError_t cudaRuntimeGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}
cudaError_t cudaDriverGetVersion(int* v) {
  *v = CUDART_VERSION;
  return cudaSuccess;
}

// ---- memory ----
cudaError_t cudaMalloc(void** p, size_t bytes) {
  *p = nullptr;
  if (cudaError_t e = capture_forbids(nullptr, "cudaMalloc")) return e;
  if (bytes == 0) return cudaSuccess;
  const keel::emu::GpuModel& m = keel::emu::gpu_model();
  Runtime& r = rt();
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (r.used[t_device] + bytes > m.memory_bytes)
      return record(cudaErrorMemoryAllocation,
                    fmt::format("{} bytes requested, {} of {} in use", bytes, r.used[t_device], m.memory_bytes));
  }
  // 256-byte aligned as cudaMalloc's, and exactly `bytes` long, so AddressSanitizer reports a
  // kernel that reads or writes one element past the end.
  void* q = nullptr;
  if (posix_memalign(&q, 256, bytes) != 0) q = nullptr;
  if (!q) return record(cudaErrorMemoryAllocation, fmt::format("the host has no {} bytes to back it", bytes));
  // Poisoned, so a kernel that reads what nothing wrote sees NaNs; not in count-only mode, where
  // nothing reads it and a full-size model's memory must not all be touched.
  if (!keel::emu::count_only()) std::memset(q, 0xff, bytes);
  std::lock_guard<std::mutex> lock(r.mu);
  r.allocations[q] = bytes;
  r.used[t_device] += bytes;
  *p = q;
  return cudaSuccess;
}
cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  if (cudaError_t e = capture_forbids(nullptr, "cudaFree")) return e;
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.allocations.find(p);
  if (it == r.allocations.end())
    return record(cudaErrorInvalidValue, fmt::format("cudaFree({}): not a pointer cudaMalloc returned", p));
  r.used[t_device] -= it->second;
  r.allocations.erase(it);
  std::free(p);
  return cudaSuccess;
}
// Pinned host memory is host memory here, and "mapped" means the kernels (host fibers) use the
// same pointer: what a device writes into it the host sees after the next synchronisation, as on
// a GPU.
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned) {
  *p = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (posix_memalign(p, 256, bytes) != 0) *p = nullptr;
  if (!*p) return record(cudaErrorMemoryAllocation, fmt::format("the host has no {} bytes to pin", bytes));
  return cudaSuccess;
}
cudaError_t cudaFreeHost(void* p) {
  std::free(p);
  return cudaSuccess;
}
cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned) {
  *device = host;
  return cudaSuccess;
}
cudaError_t cudaMemGetInfo(size_t* free, size_t* total) {
  const keel::emu::GpuModel& m = keel::emu::gpu_model();
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  *total = m.memory_bytes;
  *free = m.memory_bytes - r.used[t_device];
  return cudaSuccess;
}
// An async copy or memset on a capturing stream becomes a node of its graph: the pointers and
// the size as they are now, the bytes as they are at each replay.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind) {
  if (cudaError_t e = capture_forbids(nullptr, "cudaMemcpy (synchronous)")) return e;
  if (n) std::memmove(dst, src, n);
  return cudaSuccess;
}
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t n, cudaMemcpyKind, cudaStream_t s) {
  auto op = [dst, src, n] {
    if (n) std::memmove(dst, src, n);
  };
  if (is_capturing(s)) return keel::emu::capture(s, op), cudaSuccess;
  op();
  return cudaSuccess;
}
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t n, cudaStream_t s) {
  if (dst_device < 0 || dst_device >= device_count() || src_device < 0 || src_device >= device_count())
    return record(cudaErrorInvalidDevice);
  return cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, s);
}
cudaError_t cudaMemset(void* p, int value, size_t n) {
  if (cudaError_t e = capture_forbids(nullptr, "cudaMemset (synchronous)")) return e;
  if (n) std::memset(p, value, n);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* p, int value, size_t n, cudaStream_t s) {
  auto op = [p, value, n] {
    if (n) std::memset(p, value, n);
  };
  if (is_capturing(s)) return keel::emu::capture(s, op), cudaSuccess;
  op();
  return cudaSuccess;
}

// ---- streams and events ----
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  *s = &r.streams.emplace_back(CUstream_st{t_device, flags});
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t s) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  r.streams.remove_if([s](const CUstream_st& x) { return &x == s; });
  return cudaSuccess;
}
cudaError_t cudaStreamSynchronize(cudaStream_t s) { return capture_forbids(s, "cudaStreamSynchronize"); }
cudaError_t cudaStreamWaitEvent(cudaStream_t, cudaEvent_t, unsigned) { return cudaSuccess; }
cudaError_t cudaEventCreate(cudaEvent_t* e) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  *e = &r.events.emplace_back();
  return cudaSuccess;
}
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned) { return cudaEventCreate(e); }
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t) {
  e->at = std::chrono::steady_clock::now();
  e->recorded = true;
  return cudaSuccess;
}
cudaError_t cudaEventQuery(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventSynchronize(cudaEvent_t) { return cudaSuccess; }
cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (!start->recorded || !end->recorded) return record(cudaErrorInvalidResourceHandle, "an event was never recorded");
  *ms = std::chrono::duration<float, std::milli>(end->at - start->at).count();
  return cudaSuccess;
}
cudaError_t cudaEventDestroy(cudaEvent_t e) {
  Runtime& r = rt();
  std::lock_guard<std::mutex> lock(r.mu);
  r.events.remove_if([e](const CUevent_st& x) { return &x == e; });
  return cudaSuccess;
}

// ---- errors ----
cudaError_t cudaGetLastError() {
  const cudaError_t e = t_last;
  t_last = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError() { return t_last; }
const char* cudaGetErrorName(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidDeviceFunction: return "cudaErrorInvalidDeviceFunction";
    case cudaErrorMisalignedAddress: return "cudaErrorMisalignedAddress";
    case cudaErrorLaunchOutOfResources: return "cudaErrorLaunchOutOfResources";
    case cudaErrorIllegalState: return "cudaErrorIllegalState";
    case cudaErrorStreamCaptureUnsupported: return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated: return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureWrongThread: return "cudaErrorStreamCaptureWrongThread";
    default: return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t e) {
  // The emulator knows what broke the rule; say it, after CUDA's own words.
  thread_local std::string text;
  const char* base = e == cudaSuccess                      ? "no error"
                     : e == cudaErrorInvalidValue          ? "invalid argument"
                     : e == cudaErrorMemoryAllocation      ? "out of memory"
                     : e == cudaErrorInvalidConfiguration  ? "invalid configuration argument"
                     : e == cudaErrorInvalidDevice         ? "invalid device ordinal"
                     : e == cudaErrorInvalidResourceHandle ? "invalid resource handle"
                     : e == cudaErrorInvalidDeviceFunction ? "invalid device function"
                     : e == cudaErrorMisalignedAddress     ? "misaligned address"
                     : e == cudaErrorIllegalState          ? "the resource is not in a valid state to perform the requested operation"
                     : e == cudaErrorStreamCaptureUnsupported ? "operation not permitted when stream is capturing"
                     : e == cudaErrorStreamCaptureInvalidated
                         ? "operation failed due to a previous error during capture"
                     : e == cudaErrorStreamCaptureWrongThread
                         ? "attempt to terminate a thread-local capture sequence from another thread"
                                                           : "unknown error";
  text = base;
  if (e == t_recent && !t_recent_detail.empty()) text += ": " + t_recent_detail;
  return text.c_str();
}
