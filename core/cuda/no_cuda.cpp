// The CUDA entry points of core in a build without CUDA (preset `cpu`): there is no device,
// so asking for one raises DeviceError with the way out.
#include "core/cuda/caching_allocator.h"
#include "core/cuda/graph.h"
#include "core/dist/comm_nccl.h"
#include "core/cuda/kernels.h"
#include "core/cuda/runtime.h"
#include "core/error.h"

namespace keel::cuda {

namespace {
[[noreturn]] void no_cuda(const char* op) {
  throw DeviceError(op, "keel was built without CUDA", "rebuild with the `cuda` preset on a machine with nvcc");
}
}  // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
bool is_available() { return false; }
bool is_emulated() { return false; }
void set_emulated_count_only(bool) { no_cuda("set_emulated_count_only"); }
void set_emulated_block_schedule(const BlockSchedule&) { no_cuda("set_emulated_block_schedule"); }
BlockSchedule emulated_block_schedule() { no_cuda("emulated_block_schedule"); }
DeviceInfo device_info(int) { no_cuda("device_info"); }
size_t free_memory(int) { no_cuda("free_memory"); }
void check_device(int, const char* op) { no_cuda(op); }
void synchronize(int) { no_cuda("synchronize"); }
void memcpy_host_to_device(void*, const void*, size_t, int) { no_cuda("memcpy"); }
void memcpy_device_to_host(void*, const void*, size_t, int) { no_cuda("memcpy"); }
void memcpy_peer(void*, int, const void*, int, size_t) { no_cuda("memcpy"); }
void* event_record(int) { no_cuda("event_record"); }
double event_elapsed_ms(void*, void*) { no_cuda("event_elapsed_ms"); }
void event_destroy(void*) {}
void nvtx_push(const char*) {}
void nvtx_pop() {}
void* caching_allocate(int, size_t) { no_cuda("cuda allocate"); }
void caching_free(int, void*, size_t) {}
MemoryStats caching_stats(int) { return {}; }
void caching_reset_peak(int) {}
void empty_cache(int) {}
uint64_t begin_graph_pool(int) { no_cuda("cuda graph capture"); }
void end_graph_pool(int) {}
void release_graph_pool(int, uint64_t) {}
Graph::Graph(int device) : device_(device) { no_cuda("cuda graph"); }
Graph::~Graph() = default;
void Graph::capture(const std::function<void()>&) { no_cuda("cuda graph capture"); }
void Graph::replay() { no_cuda("cuda graph replay"); }
void Graph::reset() {}
bool is_capturing(int) { return false; }
void copy_strided(Tensor&, const Tensor&) { no_cuda("copy_strided"); }
void add_inplace(Tensor&, const Tensor&) { no_cuda("add_inplace"); }
void fill(Tensor&, double) { no_cuda("fill"); }

}  // namespace keel::cuda

namespace keel {
std::shared_ptr<Communicator> make_nccl_communicator(Communicator&, int) {
  throw DeviceError("nccl", "keel was built without CUDA, so it has no NCCL backend",
                    "use --dist-backend mpi on the CPU, or rebuild with the `cuda` preset");
}
}  // namespace keel
