// CPU kernels for reorg: at::parallel_for over output rows. One row is Wo
// consecutive tasks (see Note [reorg tasks] in reorg/reorg.h): the row's task
// gives where its inputs start and where its s output rows start; the inner
// loops walk w.
// Forward reads each input row once, contiguously, and writes s output rows;
// backward reads the s grad_output rows and writes the grad_input row.
#include <ATen/Parallel.h>
#include <torch/library.h>

#include "entry.h"
#include "../common/cpu/parallel.h"

namespace labops::reorg {
using namespace labops::cpu;  // the shared CPU helpers: parallel.h, elementwise.h
namespace {

// One row of tasks. kS > 0 is the stride known at compile time (the common
// s = 2 unrolls into two streams); kS == 0 reads it from the geometry.
template <int kS, bool kBackward, typename scalar_t>
void reorg_rows(const scalar_t* src, scalar_t* dst, int64_t numel, const reorg::ReorgShape& shape) {
  const reorg::ReorgGeometry<PlainDivider> g(shape);
  const int64_t s = kS > 0 ? kS : g.s;
  const int64_t rows = numel / (s * g.Wo);
  at::parallel_for(0, rows, grain_for(s * g.Wo), [&](int64_t begin, int64_t end) {
    for (int64_t row = begin; row < end; ++row) {
      const auto task = reorg::reorg_task(g, row * g.Wo);
      for (int64_t w = 0; w < g.Wo; ++w) {
        for (int64_t dx = 0; dx < s; ++dx) {
          const int64_t xi = reorg::reorg_x_element(g, task, w, dx), yi = reorg::reorg_y_element(g, task, w, dx);
          if constexpr (kBackward) {
            dst[xi] = src[yi];
          } else {
            dst[yi] = src[xi];
          }
        }
      }
    }
  });
}

struct ReorgLauncher {
  template <typename scalar_t>
  static void run(const scalar_t* src, scalar_t* dst, int64_t numel, const reorg::ReorgShape& shape, bool backward) {
    if (shape.s == 2) {
      backward ? reorg_rows<2, true>(src, dst, numel, shape) : reorg_rows<2, false>(src, dst, numel, shape);
    } else {
      backward ? reorg_rows<0, true>(src, dst, numel, shape) : reorg_rows<0, false>(src, dst, numel, shape);
    }
  }
};

}  // namespace
}  // namespace labops::reorg

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::reorg::Entry<labops::reorg::ReorgLauncher>::register_kernels(m);
}
