// A block's shared memory on the emulated GPU: the dynamic bytes of its launch
// (KEEL_DYNAMIC_SHARED) and its static __shared__ variables (KEEL_SHARED), both its own, so that
// blocks resident at once never share them, and both filled with NaN bytes at the block's start.
//
// A GPU checks a kernel's static plus dynamic shared memory against the kernel's limit when it
// is launched; the compiler told it the static bytes. Here they are counted as the block lays its
// variables out, when its first thread reaches each declaration: a block that would go over the
// limit stops there with a CudaError naming the kernel, the variable and the bytes, and the
// runtime remembers the kernel's static bytes, so that cudaFuncGetAttributes reports them and
// later launches are refused before they run, as on a GPU (runtime.cpp).
#include <cstring>

#include "core/cuda/emu/block_state.h"
#include "core/cuda/emu/gpu_model.h"
#include "core/cuda/emu/launch.h"
#include "core/cuda/emu/ptx.h"

namespace keel::emu {

using namespace detail;

namespace {

std::string site_str(const SharedSite& s) {
  return fmt::format("`{}` ({} bytes, {}:{} in {})", s.name, s.bytes, s.where.file_name(), s.where.line(),
                     s.where.function_name());
}

// The block's static bytes once `site` is laid out (`total`), against the kernel's limits.
void check_static(const Block& b, const SharedSite& site, size_t total) {
  const Launch& l = *b.grid->launch;
  const GpuModel& m = gpu_model();
  if (total > kMaxStaticShared)
    fail(b, fmt::format("{} brings the kernel's static shared memory to {} bytes, above the {} nvcc allows",
                        site_str(site), total, kMaxStaticShared),
         "nvcc refuses such a kernel: put the large buffers in dynamic shared memory (KEEL_DYNAMIC_SHARED)");
  if (l.max_dynamic_attribute < 0 && total + l.dynamic_shared > m.shared_per_block)
    fail(b, fmt::format("shared memory above the kernel's limit: {} brings its static shared memory to {} bytes; with "
                        "the launch's {} bytes of dynamic shared memory that is {}, above the {} a kernel may use "
                        "without cudaFuncSetAttribute",
                        site_str(site), total, l.dynamic_shared, total + l.dynamic_shared, m.shared_per_block),
         "on a GPU this launch fails (cudaErrorInvalidValue) before any thread runs: budget the static bytes too "
         "(cudaFuncGetAttributes' sharedSizeBytes), or raise the kernel's limit with cudaFuncSetAttribute(kernel, "
         "cudaFuncAttributeMaxDynamicSharedMemorySize, bytes)");
  if (l.max_dynamic_attribute >= 0 && total + static_cast<size_t>(l.max_dynamic_attribute) > m.shared_per_block_optin)
    fail(b, fmt::format("shared memory above the {}'s limit: {} brings the kernel's static shared memory to {} bytes, "
                        "and its dynamic limit (cudaFuncSetAttribute) is {}: {} in all, above the {} per block",
                        m.name, site_str(site), total, l.max_dynamic_attribute,
                        total + static_cast<size_t>(l.max_dynamic_attribute), m.shared_per_block_optin),
         "on a GPU cudaFuncSetAttribute refuses that limit (cudaErrorInvalidValue): static and dynamic bytes "
         "together must fit cudaDevAttrMaxSharedMemoryPerBlockOptin");
}

}  // namespace

void detail::prepare_shared(Block& b, size_t dynamic_bytes) {
  b.shared_bytes = dynamic_bytes;
  // Fresh storage per launch, sized exactly (AddressSanitizer's redzone starts at its last byte,
  // so an overrun of it shows), 1024-aligned as a swizzled wgmma tile needs
  // (KEEL_DYNAMIC_SHARED(..., 1024)). Its bytes are set by reset_shared before each block.
  b.shared_storage.reset(static_cast<unsigned char*>(::operator new[](dynamic_bytes ? dynamic_bytes : 1,
                                                                      std::align_val_t{1024})));
  b.shared = b.shared_storage.get();
}

void detail::reset_shared(Block& b) {
  if (b.shared_bytes) std::memset(b.shared, 0xff, b.shared_bytes);  // NaN: unwritten shared memory shows
  b.statics.count = 0;
  b.statics.used = 0;
  b.mbarriers.count = 0;  // the barriers lived in the previous block's shared memory
}

unsigned char* dynamic_shared(size_t align) {
  Block& b = block();
  if (reinterpret_cast<uintptr_t>(b.shared) % align != 0)
    throw CudaError("emulated CUDA", fmt::format("dynamic shared memory cannot be aligned to {} bytes", align));
  return b.shared;
}

unsigned char* static_shared_bytes(const SharedSite& site) {
  Block& b = block();
  StaticShared& st = b.statics;
  for (int i = 0; i < st.count; ++i)
    if (st.slots[i].site == &site) return st.base() + st.slots[i].offset;
  // The block's first thread at this declaration lays the variable out.
  const size_t offset = (st.used + site.align - 1) / site.align * site.align, total = offset + site.bytes;
  check_static(b, site, total);
  if (st.count == kMaxSharedSites)
    fail(b, fmt::format("{} is the kernel's static shared variable number {}; the emulator holds {}", site_str(site),
                        st.count + 1, kMaxSharedSites));
  // NaN bytes, as unwritten shared memory reads here; a plain loop in an uninstrumented file, so
  // that ThreadSanitizer sees no CUDA thread's write in it.
  unsigned char* p = st.base() + offset;
  for (size_t i = 0; i < site.bytes; ++i) p[i] = 0xff;
  st.slots[st.count++] = {&site, offset};
  st.used = total;
  if (total > b.grid->known_static) {
    b.grid->known_static = total;
    learn_static_shared(b.grid->launch->kernel, total);
  }
  return p;
}

uint32_t ptx::shared_address(const void* p) {
  Block& b = block();
  const auto* c = static_cast<const unsigned char*>(p);
  if (c >= b.shared && c <= b.shared + b.shared_bytes) return kDynamicSharedAddress + uint32_t(c - b.shared);
  const unsigned char* s = b.statics.base();
  if (c >= s && c <= s + b.statics.used) return kStaticSharedAddress + uint32_t(c - s);
  fail(b, fmt::format("the shared-memory address of {}, which is not in the block's shared memory", p),
       "take shared addresses of __shared__ variables and dynamic shared memory only");
}

}  // namespace keel::emu
