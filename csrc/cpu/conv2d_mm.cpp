// CPU kernels of im2col, col2im and conv2d_mm: the shared entry points
// (ops/conv2d_mm_ops.h) with a CPU launcher that runs the bodies of
// ops/conv2d_mm.h under at::parallel_for.
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <torch/library.h>

#include <vector>

#include "../ops/conv2d_mm_ops.h"
#include "../ops/conv2d_mm.h"
#include "parallel.h"

namespace labops::cpu {

struct Conv2dMMLauncher {
  // Columns of at most this many bytes at a time (see Note [column budget]):
  // about one core's L2 cache (1 MB on this course's 2-core EPYC), so the
  // columns im2col writes are still in cache when the GEMM reads them, and no
  // call allocates more than that for them. Measured with 2 threads on
  // 4 x 64 x 56 x 56 float32, 3x3: GEMMs over a cache-resident 1 MB band
  // (8 output rows) took ~15 % less CPU time than one batched GEMM over the
  // batch's 29 MB of columns, and im2col no longer writes those 29 MB to
  // memory; 0.5 MB bands (4 rows) were slower than 1 MB ones.
  static constexpr int64_t kColumnBudgetBytes = 1 << 20;

  // One task = one column row, tap (kh, kw) of one plane: L values stored in
  // sequence, each output row of them a straight copy of an input row at unit
  // stride (ops::conv2d_mm::im2col_tap).
  template <typename scalar_t>
  static void im2col(const ops::conv2d_mm::Im2colShape& s, const scalar_t* x, scalar_t* col) {
    const int64_t area = s.kernel_area();
    const int64_t tasks = s.planes() * area;
    if (tasks == 0 || s.blocks() == 0) return;
    at::parallel_for(0, tasks, grain_for(s.blocks()), [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {  // task = plane * area + tap
        const int64_t plane = task / area, tap = task - plane * area;
        scalar_t* out = col + s.column_base(plane) + tap * s.col_row_stride;
        ops::conv2d_mm::im2col_tap(s, x, plane, tap / s.kernel_w, tap % s.kernel_w, out);
      }
    });
  }

  // The GEMMs are ATen's (MKL). W is broadcast over the batch with stride 0 (expand, no copy), and the
  // bias, expanded to every column, is baddbmm's C: out = C + W . columns.
  static void gemm_forward(at::Tensor out, const at::Tensor& w, const at::Tensor& cols,
                           const std::optional<at::Tensor>& bias) {
    const int64_t nb = cols.size(0), O = w.size(0);
    const at::Tensor w_n = w.expand({nb, O, w.size(1)});
    if (bias.has_value()) {
      at::baddbmm_out(out, bias->view({1, O, 1}).expand({nb, O, cols.size(2)}), w_n, cols);
    } else {
      at::bmm_out(out, w_n, cols);
    }
  }
  static void gemm_backward_input(at::Tensor cols, const at::Tensor& w, const at::Tensor& g) {
    at::bmm_out(cols, w.t().expand({g.size(0), w.size(1), w.size(0)}), g);  // W^T: a transposed view
  }
  static void gemm_acc_grad_weight(const at::Tensor& gw, const at::Tensor& g, const at::Tensor& cols, double scale) {
    gw.addmm_(g, cols.t(), 1.0, scale);
  }

  template <typename scalar_t>
  static void col2im(const ops::conv2d_mm::Im2colShape& s, const scalar_t* col, scalar_t* image) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t rows = s.planes() * s.height;  // one image row per step
    if (rows == 0 || s.width == 0) return;
    at::parallel_for(0, rows, grain_for(s.width * s.kernel_area()), [&](int64_t begin, int64_t end) {
      std::vector<acc_t> sums(s.width);
      for (int64_t row = begin; row < end; ++row) {
        const int64_t plane = row / s.height, ih = row - plane * s.height;
        ops::conv2d_mm::col2im_gather_row<acc_t>(s, col, plane, ih, sums.data());
        scalar_t* out = image + row * s.width;
        for (int64_t iw = 0; iw < s.width; ++iw) out[iw] = static_cast<scalar_t>(sums[iw]);
      }
    });
  }
};

}  // namespace labops::cpu

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::ops::conv2d_mm::Conv2dMMOps<labops::cpu::Conv2dMMLauncher>::register_kernels(m);
}
