// Integer division by a value fixed for a whole launch, in two widths: the
// index maps of a layer take the divider as a template parameter (see
// reorg/reorg.h), and the launcher picks the 32-bit one when every index fits.
#pragma once

#include <cstdint>

#include "loop.h"

namespace labops {

// n / d with the hardware divide: any 64-bit index (the CPU, and tensors of
// 2^31 elements or more on the GPU).
struct PlainDivider {
  using index_t = int64_t;
  int64_t d = 1;
  PlainDivider() = default;
  explicit PlainDivider(int64_t divisor) : d(divisor) {}
  LABOPS_HOST_DEVICE int64_t div(int64_t n) const { return n / d; }
};

// n / d as a multiply-high, add and shift (Granlund & Montgomery; ATen's
// IntDivider<unsigned>). A GPU has no integer divide instruction: `n / d`
// is about 20 instructions, this is 3. Valid for 1 <= d and n < 2^31.
struct FastDivider {
  using index_t = uint32_t;
  uint32_t d = 1, magic = 0, shift = 0;
  FastDivider() = default;
  explicit FastDivider(uint32_t divisor) : d(divisor) {
    while (shift < 32 && (uint32_t{1} << shift) < divisor) ++shift;
    const uint64_t one = 1;
    magic = static_cast<uint32_t>(((one << 32) * ((one << shift) - divisor)) / divisor + 1);
  }
  LABOPS_HOST_DEVICE uint32_t div(uint32_t n) const {
#if defined(__CUDA_ARCH__)
    const uint32_t hi = __umulhi(n, magic);
#else
    const uint32_t hi = static_cast<uint32_t>((static_cast<uint64_t>(n) * magic) >> 32);
#endif
    return (hi + n) >> shift;
  }
};

}  // namespace labops
