// CPU kernels for reorg: at::parallel_for, the index maps of reorg/reorg.h
// inside, the entry points of reorg/entry.h.
//
// Forward, three rungs (forward_ladder in entry.h):
//   1 textbook      reorg_elements: each output element gathers its input
//                   through reorg_input_index (five to seven divisions an element);
//   2 row_tasks     reorg_rows<0>: one output row of tasks per step (see
//                   Note [reorg tasks] in reorg/reorg.h): the row's task gives
//                   where its inputs start and where its s output rows start,
//                   the inner loops walk w; the default for strides other
//                   than 2;
//   3 row_tasks_s2  reorg_rows<2>: the same with s = 2 known at compile time
//                   (the dx loop unrolls into two streams); the default for
//                   stride 2.
// Forward reads each input row once, contiguously, and writes s output rows;
// backward (reorg_rows, no rungs) reads the s grad_output rows and writes the
// grad_input row.
#include <string>

#include <ATen/Parallel.h>
#include <torch/library.h>

#include "entry.h"
#include "../common/cpu/parallel.h"

namespace labops::reorg {
using namespace labops::cpu;  // the shared CPU helpers: parallel.h, elementwise.h
namespace {

// Rung 1, the textbook: y[i] = x[reorg_input_index(i)] for every output element, as CUDA's rung 1.
template <typename scalar_t>
void reorg_elements(const scalar_t* x, scalar_t* y, int64_t numel, const reorg::ReorgShape& shape) {
  const reorg::ReorgGeometry<PlainDivider> g(shape);
  at::parallel_for(0, numel, kGrainElements, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = x[reorg::reorg_input_index(g, i)];
  });
}

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
  static void run(const scalar_t* src, scalar_t* dst, int64_t numel, const reorg::ReorgShape& shape, bool backward,
                  int forced) {
    if (backward) {
      shape.s == 2 ? reorg_rows<2, true>(src, dst, numel, shape) : reorg_rows<0, true>(src, dst, numel, shape);
      return;
    }
    ladder::Ladder& rungs = forward_ladder();
    const int rung = rungs.run(c10::DeviceType::CPU, forced, shape.s == 2 ? 3 : 2, [&](int r) {
      return r == 3 && shape.s != 2 ? "it moves stride 2 only, got stride " + std::to_string(shape.s) : std::string();
    });
    if (rung == 1) {
      reorg_elements(src, dst, numel, shape);
    } else if (rung == 2) {
      reorg_rows<0, false>(src, dst, numel, shape);
    } else {
      reorg_rows<2, false>(src, dst, numel, shape);
    }
  }
};

}  // namespace
}  // namespace labops::reorg

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::reorg::register_kernels<labops::reorg::Entry<labops::reorg::ReorgLauncher>>(m);
}
