// Device discovery, streams, host/device copies and error reporting on the CUDA runtime.
#include "core/cuda/runtime.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "core/cuda/check.h"
#include "core/cuda/counters.h"
#include "core/cuda/device_check.h"
#include "core/cuda/graph.h"
#if defined(KEEL_CUDA_EMULATED)
#include "core/cuda/emu/block.h"
#endif

// Header-only NVTX v3 (the toolkit's): no library to link; a range costs a call into the tool
// only when one (Nsight) is attached.
#include <nvtx3/nvToolsExt.h>

namespace keel::cuda {

namespace detail {
void throw_cuda(cudaError_t err, const char* stmt, const char* file, int line) {
  std::string where = std::string(stmt) + " at " + file + ":" + std::to_string(line);
  if (err == cudaErrorMemoryAllocation)
    throw OutOfMemoryError("cuda", "out of device memory in " + where,
                           "use a smaller batch or sequence length, or a smaller model");
  throw CudaError("cuda", std::string(cudaGetErrorName(err)) + " (" + cudaGetErrorString(err) + ") in " + where);
}

void throw_library(const char* lib, int status, const char* what, const char* stmt, const char* file, int line) {
  throw CudaError(lib, std::string(lib) + " status " + std::to_string(status) + (*what ? std::string(" (") + what + ")" : "") +
                           " in " + stmt + " at " + file + ":" + std::to_string(line));
}

cudaStream_t stream(int device) {
  static std::mutex mu;
  static std::vector<cudaStream_t> streams;
  std::lock_guard<std::mutex> lock(mu);
  if (streams.empty()) streams.assign(device_count(), nullptr);
  check_device(device, "stream");
  if (!streams[device]) {
    KEEL_CHECK_CUDA(cudaSetDevice(device));
    KEEL_CHECK_CUDA(cudaStreamCreateWithFlags(&streams[device], cudaStreamNonBlocking));
  }
  return streams[device];
}
}  // namespace detail

namespace {
// A wait for the device while its stream captures a graph would fail inside CUDA and invalidate
// the capture; keel says what happened instead, before anything is enqueued.
void refuse_while_capturing(int device, const char* op) {
  if (is_capturing(device))
    throw CudaError(op,
                    std::string(op) + " would wait for cuda:" + std::to_string(device) +
                        ", whose stream is capturing a CUDA graph; a capture cannot wait for the device",
                    "keep host copies and synchronisation out of the captured step: read results after replay()");
}
}  // namespace

bool built_with_cuda() { return true; }

int device_count() {
  // No driver or no device is a normal situation (CI), not an error: report zero GPUs.
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
      (void)cudaGetLastError();  // clear the sticky error so later calls start clean
      return 0;
    }
    return n;
  }();
  return count;
}

bool is_available() { return device_count() > 0; }

#if defined(KEEL_CUDA_EMULATED)
bool is_emulated() { return true; }
void set_emulated_count_only(bool on) { emu::set_count_only(on); }
void set_emulated_block_schedule(const BlockSchedule& schedule) { emu::set_block_schedule(schedule); }
BlockSchedule emulated_block_schedule() { return emu::block_schedule(); }
#else
bool is_emulated() { return false; }
void set_emulated_count_only(bool) {
  throw DeviceError("set_emulated_count_only", "a real GPU runs every kernel; only the emulated one can skip them",
                    "use a build of preset emu");
}
void set_emulated_block_schedule(const BlockSchedule&) {
  throw DeviceError("set_emulated_block_schedule", "a real GPU starts blocks in an order of its own",
                    "use a build of preset emu");
}
BlockSchedule emulated_block_schedule() {
  throw DeviceError("emulated_block_schedule", "a real GPU starts blocks in an order of its own",
                    "use a build of preset emu");
}
#endif

size_t static_shared_of(const void* kernel) {
  cudaFuncAttributes a{};
  KEEL_CHECK_CUDA(cudaFuncGetAttributes(&a, kernel));
  return a.sharedSizeBytes;
}

void check_shared_memory(const void* kernel, size_t dynamic_bytes, const char* op, const char* kernel_name) {
  // A launch repeats its shapes (a decode step's are the same at every token): a pair that fitted
  // once fits again, as a kernel's limit only ever grows.
  thread_local std::vector<std::pair<const void*, size_t>> fitted;
  for (const auto& f : fitted)
    if (f.first == kernel && f.second == dynamic_bytes) return;
  cudaFuncAttributes a{};
  KEEL_CHECK_CUDA(cudaFuncGetAttributes(&a, kernel));
  if (dynamic_bytes > static_cast<size_t>(a.maxDynamicSharedSizeBytes))
    throw CudaError(op,
                    std::string(kernel_name) + " needs " + std::to_string(a.sharedSizeBytes) +
                        " bytes of static and " + std::to_string(dynamic_bytes) +
                        " bytes of dynamic shared memory per block, " +
                        std::to_string(a.sharedSizeBytes + dynamic_bytes) + " in all; its limit is " +
                        std::to_string(a.sharedSizeBytes + static_cast<size_t>(a.maxDynamicSharedSizeBytes)) +
                        " (at most " + std::to_string(a.maxDynamicSharedSizeBytes) + " dynamic)",
                    "a launch over the limit fails with cudaErrorInvalidValue: shrink the shared-memory budget, or "
                    "raise the kernel's limit with cudaFuncSetAttribute(kernel, "
                    "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)");
  if (fitted.size() == 64) fitted.clear();
  fitted.emplace_back(kernel, dynamic_bytes);
}

void check_device(int index, const char* op) {
  int n = device_count();
  if (index < 0 || index >= n)
    throw DeviceError(op, "CUDA device " + std::to_string(index) + " is not available (" + std::to_string(n) +
                              " device(s) found)",
                      n == 0 ? "run on a machine with an NVIDIA GPU and driver, or use --device cpu"
                             : "pick a device index below the device count");
}

DeviceInfo device_info(int index) {
  check_device(index, "device_info");
  cudaDeviceProp p{};
  KEEL_CHECK_CUDA(cudaGetDeviceProperties(&p, index));
  return {p.name, p.totalGlobalMem, p.multiProcessorCount, p.major, p.minor};
}

size_t free_memory(int index) {
  check_device(index, "free_memory");
  int current = 0;
  KEEL_CHECK_CUDA(cudaGetDevice(&current));  // cudaMemGetInfo answers for the current device
  KEEL_CHECK_CUDA(cudaSetDevice(index));
  size_t free = 0, total = 0;
  const cudaError_t err = cudaMemGetInfo(&free, &total);
  KEEL_CHECK_CUDA(cudaSetDevice(current));
  KEEL_CHECK_CUDA(err);
  return free;
}

void synchronize(int index) {
  check_device(index, "synchronize");
  refuse_while_capturing(index, "synchronize");
  detail::count_sync();
  KEEL_CHECK_CUDA(cudaStreamSynchronize(detail::stream(index)));
  raise_device_check(index);
}

namespace {
// Uploads up to 1 MB (a training batch, a prompt's ids) go through a ring of pinned slots per
// device and are not waited for: the caller's buffer is copied into the slot at once, so it may
// be freed on return, and the DMA from the slot is ordered on the stream like a kernel. A slot
// is reused once the event after its last copy has passed; when it has not, that wait is the
// host synchronisation counted. A copy from pageable memory would instead wait for everything
// queued before it, so the upload of a step's batch stalled the host until the previous step's
// optimizer had finished on the GPU. Sixteen slots: with two, an H100 busy with other work made
// a training step between logged ones wait for an upload one step back (a step uploads its
// inputs and targets; --log-every N lets the host run up to N steps ahead). With sixteen it can
// be eight such steps ahead before it waits, and the slots are allocated as it gets there (at
// most 16 MB of pinned memory per device).
constexpr size_t kStageBytes = size_t{1} << 20;
constexpr int kMaxStageDevices = 64;
constexpr int kStageSlots = 16;
struct UploadStage {
  void* slot[kStageSlots] = {};
  cudaEvent_t done[kStageSlots] = {};
  int next = 0;
};
std::mutex g_stage_mu[kMaxStageDevices];
UploadStage g_stage[kMaxStageDevices];  // never freed, as the pinned read buffers below

// A slot of device's stage that no copy in flight reads, allocated on first use.
void* free_upload_slot(int device, cudaEvent_t* done) {
  UploadStage& st = g_stage[device];
  const int i = st.next;
  st.next = (st.next + 1) % kStageSlots;
  if (!st.slot[i]) {
    KEEL_CHECK_CUDA(cudaHostAlloc(&st.slot[i], kStageBytes, cudaHostAllocPortable));
    int current = 0;
    KEEL_CHECK_CUDA(cudaGetDevice(&current));
    KEEL_CHECK_CUDA(cudaSetDevice(device));  // an event belongs to the device current at its creation
    const cudaError_t made = cudaEventCreateWithFlags(&st.done[i], cudaEventDisableTiming);
    KEEL_CHECK_CUDA(cudaSetDevice(current));
    KEEL_CHECK_CUDA(made);
  } else if (const cudaError_t q = cudaEventQuery(st.done[i]); q == cudaErrorNotReady) {
    (void)cudaGetLastError();  // "not ready" is a status, not an error for the next launch check
    detail::count_sync();
    KEEL_CHECK_CUDA(cudaEventSynchronize(st.done[i]));
  } else {
    KEEL_CHECK_CUDA(q);
  }
  *done = st.done[i];
  return st.slot[i];
}
}  // namespace

void memcpy_host_to_device(void* dst, const void* src, size_t nbytes, int device) {
  refuse_while_capturing(device, "copy to the device");
  cudaStream_t s = detail::stream(device);
  if (nbytes <= kStageBytes && device < kMaxStageDevices) {
    std::lock_guard<std::mutex> lock(g_stage_mu[device]);
    cudaEvent_t done = nullptr;
    void* slot = free_upload_slot(device, &done);
    std::memcpy(slot, src, nbytes);
    detail::count_copy();  // enqueued, not waited for
    KEEL_CHECK_CUDA(cudaMemcpyAsync(dst, slot, nbytes, cudaMemcpyHostToDevice, s));
    KEEL_CHECK_CUDA(cudaEventRecord(done, s));
    return;
  }
  detail::count_sync();
  KEEL_CHECK_CUDA(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, s));
  KEEL_CHECK_CUDA(cudaStreamSynchronize(s));  // the host buffer may be freed right after we return
  raise_device_check(device);
}

namespace {
// Small reads (a decode step's token ids, a training step's loss and statistics) land in a
// pinned buffer per device and are copied on from there. A copy into pageable memory makes the
// driver stage it through pinned memory of its own, microseconds more on the critical path of
// every decode step; the DMA into pinned memory is the shortest path back. Plain arrays, no
// destructor: the buffers live as long as the process (and stay reachable for LeakSanitizer).
constexpr size_t kPinnedReadBytes = 4096;
constexpr int kMaxPinnedDevices = 64;
std::mutex g_pinned_mu[kMaxPinnedDevices];
void* g_pinned[kMaxPinnedDevices];
}  // namespace

void memcpy_device_to_host(void* dst, const void* src, size_t nbytes, int device) {
  refuse_while_capturing(device, "copy to the host");
  cudaStream_t s = detail::stream(device);
  detail::count_sync();
  if (nbytes <= kPinnedReadBytes && device < kMaxPinnedDevices) {
    std::lock_guard<std::mutex> lock(g_pinned_mu[device]);
    if (!g_pinned[device]) KEEL_CHECK_CUDA(cudaHostAlloc(&g_pinned[device], kPinnedReadBytes, cudaHostAllocPortable));
    KEEL_CHECK_CUDA(cudaMemcpyAsync(g_pinned[device], src, nbytes, cudaMemcpyDeviceToHost, s));
    KEEL_CHECK_CUDA(cudaStreamSynchronize(s));
    std::memcpy(dst, g_pinned[device], nbytes);
  } else {
    KEEL_CHECK_CUDA(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, s));
    KEEL_CHECK_CUDA(cudaStreamSynchronize(s));
  }
  raise_device_check(device);
}

void memcpy_peer(void* dst, int dst_device, const void* src, int src_device, size_t nbytes) {
  refuse_while_capturing(src_device, "copy between devices");
  refuse_while_capturing(dst_device, "copy between devices");
  detail::count_sync(), detail::count_copy(), detail::count_sync();
  KEEL_CHECK_CUDA(cudaStreamSynchronize(detail::stream(src_device)));
  KEEL_CHECK_CUDA(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, detail::stream(dst_device)));
  KEEL_CHECK_CUDA(cudaStreamSynchronize(detail::stream(dst_device)));
}

void* event_record(int device) {
  cudaEvent_t e = nullptr;
  KEEL_CHECK_CUDA(cudaEventCreate(&e));
  KEEL_CHECK_CUDA(cudaEventRecord(e, detail::stream(device)));
  return e;
}

double event_elapsed_ms(void* start, void* end) {
  KEEL_CHECK_CUDA(cudaEventSynchronize(static_cast<cudaEvent_t>(end)));
  float ms = 0;
  KEEL_CHECK_CUDA(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)));
  return ms;
}

void event_destroy(void* event) {
  if (event) (void)cudaEventDestroy(static_cast<cudaEvent_t>(event));
}

void nvtx_push(const char* name) { nvtxRangePushA(name); }
void nvtx_pop() { nvtxRangePop(); }

}  // namespace keel::cuda
