#include "core/determinism.h"

#include <atomic>

namespace keel {

namespace {
std::atomic<bool> g_deterministic{true};  // read at each launch that has an order-dependent path
}  // namespace

void set_deterministic(bool on) { g_deterministic.store(on, std::memory_order_relaxed); }
bool deterministic() { return g_deterministic.load(std::memory_order_relaxed); }

}  // namespace keel
