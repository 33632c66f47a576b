// CPU kernels of im2col, col2im and conv2d_mm: the shared entry points
// (conv2d_mm/entry.h) with a CPU launcher that runs the bodies of
// conv2d_mm/conv2d_mm.h under at::parallel_for.
//
// The conv2d_mm forward has two rungs (forward_ladder in entry.h):
//   1 textbook: forward_at on each output element, the direct convolution;
//   2 im2col_gemm: im2col into cache-sized columns, then a GEMM, oneDNN's or
//     ATen's (Note [oneDNN GEMMs]); the default for every input.
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/ops/baddbmm.h>
#include <ATen/ops/bmm.h>
#include <torch/library.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "entry.h"
#include "conv2d_mm.h"
#include "../common/cpu/parallel.h"
#include "../common/empty.h"

namespace labops::conv2d_mm {
using namespace labops::cpu;  // the shared CPU helpers: parallel.h, elementwise.h

// Note [oneDNN GEMMs]
// ATen's float32 bmm and addmm call MKL's sgemm. On one of this course's 2-core
// VMs (an AMD EPYC with AVX-512) MKL reached about 190 GFLOP/s on the forward's
// GEMM, while oneDNN's matmul, the library behind F.conv2d's CPU kernels,
// reached about 440 on the same operands. ATen exports oneDNN's matmul as
// at::native::mkldnn_matmul(a, b, result, beta, alpha) (result = beta * result +
// alpha * a . b) but ships no header for it, so it is declared below, weak: the
// library still loads where a torch build lacks it, and the pointer is then null.
// The launchers fall back to ATen's GEMM when it is missing, when it raises (it
// needs AVX-512 or AVX-NE-CONVERT), or when LABOPS_CPU_GEMM=aten asks for the
// fallback (the tests run both).
}  // namespace labops::conv2d_mm

namespace at::native {
__attribute__((weak, visibility("default"))) void mkldnn_matmul(const at::Tensor& a, const at::Tensor& b,
                                                                 const at::Tensor& result, float beta, float alpha);
}  // namespace at::native

namespace labops::conv2d_mm {
namespace {

using OnednnMatmul = void (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&, float, float);

OnednnMatmul find_onednn_matmul() {
  const char* choice = std::getenv("LABOPS_CPU_GEMM");
  if (choice != nullptr && std::strcmp(choice, "aten") == 0) return nullptr;
  return &at::native::mkldnn_matmul;  // null where libtorch_cpu does not export it
}

// A oneDNN call costs about 15 us more host time than an MKL one (measured on tiny inputs, 2 threads):
// worth it from about 2^23 multiply-adds, where the faster GEMM saves more than that.
constexpr int64_t kOnednnMinMultiplyAdds = int64_t(1) << 23;

const OnednnMatmul onednn_matmul = find_onednn_matmul();  // looked up when the library loads
std::atomic<bool> onednn_usable{onednn_matmul != nullptr};  // until it first raises

// Whether an (m x k) . (k x n) GEMM of this dtype goes to oneDNN.
bool onednn_takes(at::ScalarType dtype, int64_t m, int64_t k, int64_t n) {
  return dtype == at::kFloat && m * k * n >= kOnednnMinMultiplyAdds && onednn_usable.load(std::memory_order_relaxed);
}

// result = beta * result + alpha * a . b through oneDNN, for 2-D operands;
// false (result untouched) where onednn_takes says no or the call raises.
// oneDNN reads `a` and `b` in place when each is contiguous or a transposed
// view, and writes a contiguous `result` in place; a strided result goes
// through a contiguous copy.
bool onednn_gemm(const at::Tensor& a, const at::Tensor& b, const at::Tensor& result, float beta, float alpha) {
  if (!onednn_takes(a.scalar_type(), a.size(0), a.size(1), b.size(1))) return false;
  const OnednnMatmul matmul = onednn_matmul;
  try {
    if (result.is_contiguous()) {
      matmul(a, b, result, beta, alpha);
    } else {
      at::Tensor dense = beta != 0.0f ? result.contiguous() : labops::empty(result.sizes(), result.options());
      matmul(a, b, dense, beta, alpha);
      result.copy_(dense);
    }
    return true;
  } catch (const c10::Error&) {  // raised before it writes: the CPU lacks what it needs
    onednn_usable.store(false, std::memory_order_relaxed);
    return false;
  }
}

}  // namespace

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

  // The forward's rung (forward_ladder, entry.h): im2col_gemm unless the textbook is forced; both take any input.
  static int forward_rung(int forced, const conv2d_mm::Im2colShape&, int64_t, at::ScalarType) {
    return forward_ladder().run(c10::DeviceType::CPU, forced, 2, [](int) { return std::string(); });
  }
  static constexpr bool kImplicitGemm = false;  // the CPU's ladder stops at rung 2 (a forced 3, 4 or 5 is refused)

  // Rung 1, the textbook: forward_at per output element, the elements shared among the threads.
  template <typename scalar_t>
  static void forward_textbook(const conv2d_mm::Im2colShape& s, const scalar_t* x, const scalar_t* w,
                               const scalar_t* bias, int64_t out_channels, scalar_t* out) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t n = s.batch * out_channels * s.blocks();
    at::parallel_for(0, n, grain_for(s.channels * s.kernel_area()), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        out[i] = static_cast<scalar_t>(conv2d_mm::forward_at<acc_t>(s, x, w, bias, out_channels, i));
      }
    });
  }

  // One task = one column row, tap (kh, kw) of one plane: L values stored in
  // sequence, each output row of them a straight copy of an input row at unit
  // stride (conv2d_mm::im2col_tap).
  template <typename scalar_t>
  static void im2col(const conv2d_mm::Im2colShape& s, const scalar_t* x, scalar_t* col) {
    const int64_t area = s.kernel_area();
    const int64_t tasks = s.planes() * area;
    if (tasks == 0 || s.blocks() == 0) return;
    at::parallel_for(0, tasks, grain_for(s.blocks()), [&](int64_t begin, int64_t end) {
      for (int64_t task = begin; task < end; ++task) {  // task = plane * area + tap
        const int64_t plane = task / area, tap = task - plane * area;
        scalar_t* out = col + s.column_base(plane) + tap * s.col_row_stride;
        conv2d_mm::im2col_tap(s, x, plane, tap / s.kernel_w, tap % s.kernel_w, out);
      }
    });
  }

  // The GEMMs are oneDNN's for float32 (Note [oneDNN GEMMs]), one image at a time, else ATen's (MKL),
  // with W broadcast over the batch with stride 0 (expand, no copy). The bias, expanded to every column,
  // is the C of out = C + W . columns.
  static void gemm_forward(at::Tensor out, const at::Tensor& w, const at::Tensor& cols,
                           const std::optional<at::Tensor>& bias) {
    const int64_t nb = cols.size(0), O = w.size(0);
    if (onednn_takes(w.scalar_type(), O, w.size(1), cols.size(2))) {
      if (bias.has_value()) out.copy_(bias->view({1, O, 1}).expand(out.sizes()));  // C, added by beta = 1
      bool done = true;
      for (int64_t n = 0; done && n < nb; ++n) done = onednn_gemm(w, cols[n], out[n], bias.has_value() ? 1.f : 0.f, 1.f);
      if (done) return;
    }
    const at::Tensor w_n = w.expand({nb, O, w.size(1)});
    if (bias.has_value()) {
      at::baddbmm_out(out, bias->view({1, O, 1}).expand({nb, O, cols.size(2)}), w_n, cols);
    } else {
      at::bmm_out(out, w_n, cols);
    }
  }
  static void gemm_backward_input(at::Tensor cols, const at::Tensor& w, const at::Tensor& g) {
    bool done = true;  // false once a GEMM is not oneDNN's (then ATen does them all)
    for (int64_t n = 0; done && n < g.size(0); ++n) done = onednn_gemm(w.t(), g[n], cols[n], 0.f, 1.f);
    if (!done) at::bmm_out(cols, w.t().expand({g.size(0), w.size(1), w.size(0)}), g);  // W^T: a transposed view
  }
  static void gemm_acc_grad_weight(const at::Tensor& gw, const at::Tensor& g, const at::Tensor& cols, double scale,
                                   double beta) {  // beta 0: gw is not read (addmm_ and oneDNN both promise that)
    if (!onednn_gemm(g, cols.t(), gw, static_cast<float>(beta), static_cast<float>(scale))) {
      gw.addmm_(g, cols.t(), beta, scale);
    }
  }

  static at::Tensor contiguous(const at::Tensor& t) { return t.contiguous(); }

  // Chunks run on several threads at once here, so the bias gradient is one ATen sum after them.
  static constexpr bool kSumsBiasWhileGathering = false;
  static void gather_rows(const at::Tensor& g, const at::Tensor& rows, const at::Tensor& bias, bool) {
    TORCH_INTERNAL_ASSERT(!bias.defined(), "conv2d_mm: the CPU launcher does not sum the bias while gathering");
    if (rows.defined()) rows.view({g.size(1), g.size(0), g.size(2)}).copy_(g.transpose(0, 1));
  }

  template <typename scalar_t>
  static void col2im(const conv2d_mm::Im2colShape& s, const scalar_t* col, scalar_t* image) {
    using acc_t = at::opmath_type<scalar_t>;
    const int64_t rows = s.planes() * s.height;  // one image row per step
    if (rows == 0 || s.width == 0) return;
    at::parallel_for(0, rows, grain_for(s.width * s.kernel_area()), [&](int64_t begin, int64_t end) {
      std::vector<acc_t> sums(s.width);
      for (int64_t row = begin; row < end; ++row) {
        const int64_t plane = row / s.height, ih = row - plane * s.height;
        conv2d_mm::col2im_gather_row<acc_t>(s, col, plane, ih, sums.data());
        scalar_t* out = image + row * s.width;
        for (int64_t iw = 0; iw < s.width; ++iw) out[iw] = static_cast<scalar_t>(sums[iw]);
      }
    });
  }
};

}  // namespace labops::conv2d_mm

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::conv2d_mm::register_kernels<labops::conv2d_mm::Entry<labops::conv2d_mm::Conv2dMMLauncher>>(m);
}
