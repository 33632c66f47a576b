// The grain rule for at::parallel_for in the CPU launchers.
//
// at::parallel_for(begin, end, grain, f) hands each thread chunks of at
// least `grain` items, and runs everything on the calling thread when the
// range is no longer than one grain. Waking a thread pool costs microseconds,
// so a task should carry enough work to pay for it: about kGrainElements
// elements. A launcher whose items are whole rows or planes divides by the
// elements one item touches.
#pragma once

#include <algorithm>
#include <cstdint>

namespace labops::cpu {

// Elements of work per parallel_for task: small tensors stay on one thread.
constexpr int64_t kGrainElements = 32768;

// The grain, in items, for items of `elements_per_item` elements each (at
// least one item per task).
inline int64_t grain_for(int64_t elements_per_item) {
  return std::max<int64_t>(1, kGrainElements / std::max<int64_t>(1, elements_per_item));
}

}  // namespace labops::cpu
