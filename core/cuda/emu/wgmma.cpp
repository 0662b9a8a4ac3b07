// The emulated wgmma's bookkeeping (wgmma.h): the wgmmas a warpgroup has issued, each thread's
// in flight, the checks, and where a descriptor's elements lie.
#include "core/cuda/emu/wgmma.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <limits>
#include <vector>

#include "core/cuda/emu/block_state.h"

namespace keel::emu::detail {

constexpr int kWarpgroup = 128;
constexpr int kRing = 64;  // wgmmas of a warpgroup between the first thread's issue and the last one's wait

// One wgmma of a warpgroup, as its first thread issued it.
struct WgmmaRecord {
  int64_t seq = -1;
  ptx::WgmmaOp op{};
  bool a_in_registers = false;
  int issued = 0, done = 0;  // threads that issued it, and whose wait completed it
  std::source_location where;
  std::array<std::array<uint32_t, 4>, kWarpgroup> a{};  // the register form's A, by thread
};

// One wgmma of a thread, issued and not yet completed by a wait.
struct WgmmaPending {
  int64_t seq;
  float* d;
  uint32_t group;
  std::array<float, 128> base;  // the accumulators it adds to, once known
  const uint32_t* a;            // the register form's A registers, and what they held at the issue
  std::array<uint32_t, 4> a_at_issue;
};

struct WgmmaThread {
  std::vector<WgmmaPending> pending;  // in issue order
  int64_t issued = 0;
  uint32_t committed = 0;  // groups committed so far; the open group has this number
  bool fenced = false;
  bool in_wait = false;  // completing the wgmmas of a wait, after the others ran
  int setmaxnreg = 0;  // setmaxnreg instructions it has executed
};

// The register counts a warpgroup's setmaxnreg instructions asked for, in order: what the
// first thread to execute each asked for (inc: + 1000).
constexpr int kSetmaxnregs = 16;

struct WgmmaState {
  std::array<std::array<WgmmaRecord, kRing>, kMaxThreads / kWarpgroup> groups;
  std::array<std::array<int, kSetmaxnregs>, kMaxThreads / kWarpgroup> setmaxnreg{};
  std::array<WgmmaThread, kMaxThreads> threads;
};

void WgmmaStateDeleter::operator()(WgmmaState* s) const { delete s; }

void reset_wgmma(Block& b) {
  if (!b.wgmma) return;
  for (auto& group : b.wgmma->groups)
    for (WgmmaRecord& r : group) r.seq = -1, r.issued = r.done = 0;
  for (WgmmaThread& t : b.wgmma->threads)
    t.pending.clear(), t.issued = 0, t.committed = 0, t.fenced = false, t.setmaxnreg = 0;
  for (auto& group : b.wgmma->setmaxnreg) group.fill(0);
}

}  // namespace keel::emu::detail

namespace keel::emu::ptx {

namespace {

using detail::Block;
using detail::kRing;
using detail::kWarpgroup;
using detail::WgmmaPending;
using detail::WgmmaRecord;
using detail::WgmmaThread;

std::string at(const std::source_location& w) { return detail::where_str(w) + " in " + w.function_name(); }

detail::WgmmaState& state(Block& b) {
  if (!b.wgmma) b.wgmma.reset(new detail::WgmmaState);
  return *b.wgmma;
}

// The calling thread's index, after checking that its warpgroup is 4 whole warps of the block.
int warpgroup_member(Block& b, const char* op, const std::source_location& where) {
  const int me = detail::current_index(b);
  if ((me / kWarpgroup + 1) * kWarpgroup > b.n)
    detail::fail(b, fmt::format("{} ({}) by thread {} of a block of {} threads: its warpgroup (threads {}..{}) is "
                                "not 4 whole warps of the block", op, at(where), me, b.n, me / kWarpgroup * kWarpgroup,
                                me / kWarpgroup * kWarpgroup + kWarpgroup - 1),
                 "launch blocks of a multiple of 128 threads for wgmma");
  return me;
}

bool same(const WgmmaOp& x, const WgmmaOp& y) {
  return x.n == y.n && x.input == y.input && x.trans_a == y.trans_a && x.trans_b == y.trans_b &&
         x.accumulate == y.accumulate && x.desc_a == y.desc_a && x.desc_b == y.desc_b;
}

std::string describe(const WgmmaOp& op, bool a_in_registers) {
  return fmt::format("m64n{}k16 {} A {} B {:#018x}{}", op.n, op.input == MmaInput::bf16 ? "bf16" : "f16",
                     a_in_registers ? "registers" : fmt::format("{:#018x}", op.desc_a), op.desc_b,
                     op.accumulate ? " accumulating" : "");
}

// The warpgroup's record of the thread's next wgmma: made by the first thread to issue it.
WgmmaRecord& record_for(Block& b, int me, int64_t seq, const WgmmaOp& op, bool a_regs,
                        const std::source_location& where) {
  WgmmaRecord& r = state(b).groups[me / kWarpgroup][seq % kRing];
  if (r.seq != seq) {
    if (r.seq >= 0 && r.done < kWarpgroup)
      detail::fail(b, fmt::format("wgmma ({}) number {} of warpgroup {} while its number {} is not complete in every "
                                  "thread: more than {} in flight", at(where), seq, me / kWarpgroup, r.seq, kRing),
                   "wait (wgmma.wait_group) before issuing that many");
    r.seq = seq, r.op = op, r.a_in_registers = a_regs, r.issued = r.done = 0, r.where = where;
  } else if (!same(r.op, op) || r.a_in_registers != a_regs) {
    detail::fail(b, fmt::format("the threads of warpgroup {} issue different wgmmas as their number {}: thread {} "
                                "{} ({}), a thread before it {} ({})", me / kWarpgroup, seq, me, describe(op, a_regs),
                                at(where), describe(r.op, r.a_in_registers), at(r.where)),
                 "all 128 threads of a warpgroup issue each wgmma together, with the same descriptors");
  }
  return r;
}

}  // namespace

void wgmma_fence(const std::source_location& where) {
  Block& b = detail::block();
  const int me = warpgroup_member(b, "wgmma.fence", where);
  state(b).threads[me].fenced = true;
}

void wgmma_issue(const WgmmaOp& op, float* d, const uint32_t* a, const std::source_location& where) {
  Block& b = detail::block();
  const int me = warpgroup_member(b, "wgmma.mma_async", where);
  if (op.n < 8 || op.n > 256 || op.n % 8 != 0)
    detail::fail(b, fmt::format("wgmma.mma_async with N = {} ({}); the ISA allows multiples of 8 from 8 to 256", op.n,
                                at(where)));
  WgmmaThread& t = state(b).threads[me];
  if (!t.fenced)
    detail::fail(b, fmt::format("wgmma.mma_async ({}) by thread {} without a wgmma.fence since the kernel's start or "
                                "its last wgmma.wait_group", at(where), me),
                 "issue wgmma.fence before each batch of wgmmas: it orders the registers they read and write "
                 "after the thread's own accesses (on a GPU, without it the result is undefined)");
  if (t.pending.size() == kRing)
    detail::fail(b, fmt::format("more than {} wgmmas in flight in thread {} ({})", kRing, me, at(where)),
                 "wait (wgmma.wait_group) for some before issuing more");
  const int64_t seq = t.issued++;
  WgmmaRecord& r = record_for(b, me, seq, op, a != nullptr, where);
  if (a) std::copy(a, a + 4, r.a[me % kWarpgroup].begin());
  ++r.issued;
  WgmmaPending p{seq, d, t.committed, {}, a, {}};
  if (a) std::copy(a, a + 4, p.a_at_issue.begin());
  const bool chained = std::any_of(t.pending.begin(), t.pending.end(), [&](const WgmmaPending& q) { return q.d == d; });
  if (!chained) std::copy(d, d + op.n / 2, p.base.begin());
  t.pending.push_back(p);
  std::fill(d, d + op.n / 2, std::numeric_limits<float>::quiet_NaN());  // undefined until the wait
}

void wgmma_commit_group(const std::source_location& where) {
  Block& b = detail::block();
  ++state(b).threads[warpgroup_member(b, "wgmma.commit_group", where)].committed;
}

bool wgmma_next_due(int keep, WgmmaDue* due, const std::source_location& where) {
  Block& b = detail::block();
  const int me = warpgroup_member(b, "wgmma.wait_group", where);
  WgmmaThread& t = state(b).threads[me];
  t.fenced = false;
  if (t.pending.empty() || int64_t(t.pending.front().group) >= int64_t(t.committed) - keep) {
    t.in_wait = false;
    return false;
  }
  // A GPU reads the operands at any moment up to the wait: the rest of the block runs first (once
  // a wait), so that a tile another thread overwrites too early (a slot released before this
  // wait, a buffer rewritten without a barrier) is overwritten before the read.
  if (!t.in_wait) {
    t.in_wait = true;
    detail::let_others_run(b);
  }
  const WgmmaPending& p = t.pending.front();
  WgmmaRecord& r = b.wgmma->groups[me / kWarpgroup][p.seq % kRing];
  // A GPU reads the register form's A at any moment up to the wait too: registers the thread
  // rewrote in between (the next tile's fragments written too early) are not what it multiplies.
  if (p.a && !std::equal(p.a_at_issue.begin(), p.a_at_issue.end(), p.a))
    detail::fail(b, fmt::format("thread {} changed the A registers of its wgmma number {} ({}) before the "
                                "wgmma.wait_group that completes it ({})", me, p.seq, at(r.where), at(where)),
                 "leave a wgmma's A fragment unchanged until a wait covers its group: a GPU may read the "
                 "registers at any moment until then");
  // Its warpgroup's other threads issue it while this one sleeps.
  while (__atomic_load_n(&r.issued, __ATOMIC_RELAXED) != kWarpgroup) wait_for_flag(&r.issued, kWarpgroup, where);
  due->op = r.op;
  due->a_in_registers = r.a_in_registers;
  due->warp = me % kWarpgroup / 32, due->lane = me % 32;
  if (r.a_in_registers) {
    // Rows 16w + g and + 8 are held by lanes 4g..4g+3 of warp w: k pairs 0..3 in their
    // registers 0 and 1, k pairs 4..7 in registers 2 and 3.
    const int first = due->warp * 32 + due->lane / 4 * 4;
    for (int h = 0; h < 2; ++h)
      for (int pair = 0; pair < 8; ++pair) due->a_rows[h][pair] = r.a[first + pair % 4][h + 2 * (pair / 4)];
  }
  for (int i = 0; i < r.op.n / 2; ++i) due->acc[i] = r.op.accumulate ? p.base[i] : 0.0f;
  return true;
}

void wgmma_done(const float* result) {
  Block& b = detail::block();
  const int me = detail::current_index(b);
  WgmmaThread& t = b.wgmma->threads[me];
  const WgmmaPending& p = t.pending.front();
  WgmmaRecord& r = b.wgmma->groups[me / kWarpgroup][p.seq % kRing];
  const int n = r.op.n / 2;
  auto next = std::find_if(t.pending.begin() + 1, t.pending.end(), [&](const WgmmaPending& q) { return q.d == p.d; });
  std::copy(result, result + n, next != t.pending.end() ? next->base.begin() : p.d);
  ++r.done;
  t.pending.erase(t.pending.begin());
}

void setmaxnreg(bool inc, uint32_t count, const std::source_location& where) {
  Block& b = detail::block();
  const char* op = inc ? "setmaxnreg.inc" : "setmaxnreg.dec";
  const int me = warpgroup_member(b, op, where);
  if (count < 24 || count > 256 || count % 8 != 0)
    detail::fail(b, fmt::format("{} to {} registers ({}); the ISA allows multiples of 8 from 24 to 256", op, count,
                                at(where)));
  WgmmaThread& t = state(b).threads[me];
  if (t.setmaxnreg == detail::kSetmaxnregs)
    detail::fail(b, fmt::format("more than {} setmaxnreg in thread {} ({})", detail::kSetmaxnregs, me, at(where)),
                 "the emulator holds that many per thread");
  int& first = b.wgmma->setmaxnreg[me / kWarpgroup][t.setmaxnreg++];
  const int asked = int(count) + (inc ? 1000 : 0);
  if (first == 0) first = asked;
  if (first != asked)
    detail::fail(b, fmt::format("the threads of warpgroup {} disagree at their setmaxnreg number {} ({}): thread {} "
                                "asks {} {}, a thread before it {} {}", me / kWarpgroup, t.setmaxnreg, at(where), me,
                                op, count, first > 1000 ? "setmaxnreg.inc" : "setmaxnreg.dec", first % 1000),
                 "all 128 threads of a warpgroup execute each setmaxnreg together, with the same count");
}

const unsigned char* wgmma_element(uint64_t desc, bool mn_major, int mn, int k, const std::source_location& where) {
  Block& b = detail::block();
  const uint32_t start = uint32_t(desc & 0x3fff) << 4, lbo = uint32_t(desc >> 16 & 0x3fff) << 4;
  const uint32_t sbo = uint32_t(desc >> 32 & 0x3fff) << 4, base_offset = uint32_t(desc >> 49 & 7);
  const uint32_t mode = uint32_t(desc >> 62), width = mode == 0 ? 0 : 256u >> mode;  // 128, 64, 32 bytes
  if (base_offset != 0)
    detail::fail(b, fmt::format("a wgmma descriptor {:#018x} ({}) with base offset {}, which the emulator does not "
                                "model", desc, at(where), base_offset),
                 "start each swizzled tile at a multiple of 8 rows of its swizzle width (1024 bytes for 128)");
  const uint32_t umn = uint32_t(mn), uk = uint32_t(k);
  uint32_t offset;
  if (!mn_major)  // rows of k; 8-row groups sbo apart
    offset = width ? umn % 8 * width + umn / 8 * sbo + uk * 2 : umn % 8 * 16 + umn / 8 * sbo + uk / 8 * lbo + uk % 8 * 2;
  else  // rows of m or n, one per k; 8-k groups sbo (swizzled) or lbo apart
    offset = width ? umn % (width / 2) * 2 + umn / (width / 2) * lbo + uk % 8 * width + uk / 8 * sbo
                   : umn % 8 * 2 + umn / 8 * sbo + uk % 8 * 16 + uk / 8 * lbo;
  uint32_t addr = start + offset;
  if (width) addr ^= (addr >> 7 & (width / 16 - 1)) << 4;
  if (addr < kDynamicSharedAddress || addr + 2 > kDynamicSharedAddress + b.shared_bytes)
    detail::fail(b, fmt::format("wgmma operand element ({}, k {}) of descriptor {:#018x} ({}) is at shared address "
                                "{}, outside the block's dynamic shared memory ({} bytes from {})", mn, k, desc,
                                at(where), addr, b.shared_bytes, kDynamicSharedAddress),
                 "build descriptors from shared_address() of a tile in dynamic shared memory, with its strides");
  return b.shared + (addr - kDynamicSharedAddress);
}

}  // namespace keel::emu::ptx
