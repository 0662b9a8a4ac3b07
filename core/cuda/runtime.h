// The CUDA runtime as the rest of keel sees it: plain C++, no CUDA headers, so that code
// above core compiles the same with or without the CUDA backend. When keel is built without
// CUDA (preset `cpu`), device_count() is 0 and everything else raises DeviceError.
#pragma once

#include <cstddef>
#include <string>

namespace keel::cuda {

bool built_with_cuda();
// Number of usable GPUs: 0 when there is no driver, no device, or no CUDA build.
int device_count();
bool is_available();

// True when the CUDA device is the emulated GPU (preset emu): kernels run on the host.
bool is_emulated();
// The emulated GPU only: while on, kernels and cuBLAS/cuBLASLt products do no work, and
// everything else happens as usual (launch checks, counters, allocations, copies, graphs). A
// program then issues its operations at sizes the emulator could never compute, in seconds, with
// its values meaningless: what the profiler's counts and predictions need (apps/bench/bench_profile).
// DeviceError anywhere else.
void set_emulated_count_only(bool on);

// The emulated GPU only: the order in which a launch's blocks start and how many may be resident
// at once. A GPU promises neither, so a kernel whose result or progress depends on them is wrong
// on some GPU some day; running the tests under other orders shows it here (docs/emulation.md,
// "Block order"). shuffle draws a permutation per launch from the seed and the launch's number in
// the process. With resident > 1 the resident blocks take turns at every __syncthreads.
// KEEL_EMU_BLOCK_ORDER (index, reverse, shuffle or shuffle:SEED) and KEEL_EMU_RESIDENT_BLOCKS
// (1 to 64) set the default: index order, one block at a time. DeviceError anywhere else.
struct BlockSchedule {
  enum class Order { index, reverse, shuffle };
  Order order = Order::index;
  unsigned long long seed = 0;
  int resident = 1;
};
void set_emulated_block_schedule(const BlockSchedule& schedule);
BlockSchedule emulated_block_schedule();

struct DeviceInfo {
  std::string name;
  size_t total_memory = 0;
  int multiprocessors = 0;
  int major = 0, minor = 0;  // compute capability
  // Whether the device runs sm_90a code: compute capability 9.0 exactly, since the
  // architecture-specific features of sm_90a (wgmma, setmaxnreg) run on no other GPU.
  bool runs_sm90a() const { return major == 9 && minor == 0; }
};
DeviceInfo device_info(int index);

// Bytes of device memory free right now (cudaMemGetInfo), as the driver sees it: memory that
// other processes or keel's caching allocator hold is not free.
size_t free_memory(int index);

// Throws DeviceError naming `op` when device `index` does not exist.
void check_device(int index, const char* op);
void synchronize(int index);

// Host <-> device copies, ordered on the device's compute stream. Device-to-host returns when
// the data has arrived (it waits for the kernels queued before it; up to 4 KB it lands in a
// pinned buffer of the device's first, the shortest way back for a token id). Host-to-device up
// to 1 MB returns at once: the source is copied into pinned memory, whose DMA runs in stream
// order, so a step's batch upload does not wait for the previous step's work; larger ones
// return when the data has arrived.
void memcpy_host_to_device(void* dst, const void* src, size_t nbytes, int device);
void memcpy_device_to_host(void* dst, const void* src, size_t nbytes, int device);
void memcpy_peer(void* dst, int dst_device, const void* src, int src_device, size_t nbytes);

// For the profiler (core/profiler.h): an event recorded now on the device's stream, the
// milliseconds between two (waits for the later one; not counted as a sync, so profiling does
// not change the counts it reports), and NVTX ranges that Nsight Systems and Nsight Compute show
// under keel's op names. Without CUDA the events raise DeviceError and the ranges do nothing.
void* event_record(int device);
double event_elapsed_ms(void* start, void* end);
void event_destroy(void* event);
void nvtx_push(const char* name);
void nvtx_pop();

}  // namespace keel::cuda
