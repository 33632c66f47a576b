// Tensor-level entry points of im2col, col2im and conv2d_mm (THNN's
// SpatialConvolutionMM), written once for both devices: conv2d_mm/cpu.cpp uses
// Entry<cpu::Conv2dMMLauncher>, conv2d_mm/cuda.cu uses
// Entry<cuda::Conv2dMMLauncher>.
// A Launcher provides
//   template <typename scalar_t> static void im2col(const Im2colShape&, const scalar_t* x, scalar_t* col);
//   template <typename scalar_t> static void col2im(const Im2colShape&, const scalar_t* col, scalar_t* image);
//   static constexpr int64_t kColumnBudgetBytes;  // largest `columns` buffer to allocate at once
// and the three GEMMs of the layer, on tensors (row-major matrices, batch first):
//   static void gemm_forward(out, w, cols, bias);           // out[n] = w . cols[n] (+ bias[o] on row o)
//   static void gemm_backward_input(cols, w, g);            // cols[n] = w^T . g[n]
//   static void gemm_acc_grad_weight(gw, g, cols, scale, beta);  // gw = beta * gw + scale * g . cols^T
// and the step that lays grad_output out for the last of them:
//   static constexpr bool kSumsBiasWhileGathering;  // whether gather_rows takes a bias to sum into
//   static void gather_rows(g, rows, bias, add_to_bias);  // rows (O, nb*L) = g (nb, O, L), images inside
// and the forward's ladder (forward_ladder below):
//   static int forward_rung(int forced, const Im2colShape&, int64_t out_channels, at::ScalarType);  // the rung
//       a forward runs; forced: the forced rung, 0 for none (the shape and dtype: for why_not, when a forced
//       rung cannot take them)
//   template <typename scalar_t> static void forward_textbook(const Im2colShape&, const scalar_t* x,
//       const scalar_t* w, const scalar_t* bias, int64_t out_channels, scalar_t* out);  // rung 1, bias may be null
//   static constexpr bool kImplicitGemm;  // whether the device has rungs 3 to 5, and with them
//   template <typename scalar_t> static void forward_implicit_gemm(...);  // the same arguments as forward_textbook
//   static void forward_tensor_cores(const Im2colShape&, x4, weight, bias, out, bool wgmma);  // rung 4, or 5 with
//       wgmma; on tensors: it picks the layouts
//   static bool backward_input_as_convolution(const Im2colShape&, g4, weight, grad_input);  // false: not taken
//   static bool backward_weight_as_convolution(const Im2colShape&, g4, x4, gw4, scale, beta, bias_sum);  // false:
//       not taken; g4 and x4 NCHW or channels_last, gw4 (O, C, kH, kW) contiguous or channels_last, bias_sum
//       (when defined) gets the bias gradient at scale 1
//   static bool backward_weight_by_taps(const Im2colShape&, g4, x4, gw4, scale, beta, bias_sum);  // the same
// The CPU's are ATen's (bmm, baddbmm, addmm_: MKL); the GPU's call cuBLAS
// directly, without ATen's checks and views around each call, which cost more
// host time than a small convolution's kernels (tools/host_time.py).

#pragma once

#include <array>
#include <optional>
#include <tuple>
#include <vector>

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/ThreadLocalState.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/sum.h>
#include <ATen/ops/zeros.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/DimVector.h>

#include "../common/check.h"
#include "../common/empty.h"
#include "../common/ladder.h"
#include "conv2d_mm.h"

namespace labops::conv2d_mm {

// The forward's rungs (Note [the ladder], common/ladder.h), rung 1 the textbook body forward_at of
// conv2d_mm.h. The conv2d_mm forward only: im2col, col2im and the backward ops have no rungs. Which rung
// runs by default: labops/ops/conv2d_mm.py LADDER_DEFAULTS, docs/layers/conv2d_mm.md "The ladder".
// Rungs 3 and 4, the implicit GEMM (Note [implicit GEMM], cuda.cu) and the same on tensor cores (Note
// [tensor-core implicit GEMM]), are the CUDA ladder's alone.
//
// On the CPU the GEMM of im2col_gemm is oneDNN's or ATen's (Note [oneDNN GEMMs], cpu.cpp), chosen per GEMM:
// one rung, not two. The kernel this course writes (im2col) and the math are the same; which library
// multiplies depends on the GEMM's size (the last chunk of a batch may differ from the others), on the torch
// build and on the CPU (oneDNN may raise, once, and is then left alone), so a oneDNN rung could not be run
// everywhere, nor forced without a fallback. LABOPS_CPU_GEMM=aten picks ATen's for the whole process.
inline ladder::Ladder& forward_ladder() {
  static ladder::Ladder rungs(
      "conv2d_mm", "conv2d_mm",
      {{"textbook", "forward_at per output element (the direct convolution, no columns), elements shared "
                    "among the threads"},
       {"im2col_gemm", "im2col of a chunk of images or output rows into cache-sized columns, then out = W . "
                       "columns + bias by a GEMM (oneDNN's for large float32 ones, else ATen's), chunks shared "
                       "among the threads"}},
      {{"textbook", "forward_textbook_kernel: forward_at per output element, grid-stride loop"},
       {"im2col_gemm", "im2col_kernel into the columns of up to 512 MB of images at a time, then one "
                       "strided-batched cuBLAS GEMM per chunk onto the broadcast bias"},
       {"implicit_gemm", "implicit_gemm_kernel: the GEMM of im2col_gemm over the whole batch without the "
                         "columns, each block a tile of filters x output pixels whose columns it loads from x "
                         "into shared memory, 8 x 8 outputs per thread in registers, the bias added last"},
       {"tensor_cores", "tensor_core_gemm_kernel: the implicit GEMM on tensor cores (mma.sync: float16, "
                        "bfloat16, float32 as TF32 when torch allows it), x read as channels_last, 16-byte "
                        "cp.async loads three steps ahead; C a multiple of 8 (4 in float32)"},
       {"wgmma", "wgmma_gemm_kernel: the same implicit GEMM on Hopper's warpgroup tensor cores (wgmma, sm_90a: "
                 "H100, H200), both operands read by the tensor cores from 128-byte-swizzled shared memory, "
                 "tiles of 128 pixels x 64 or 128 filters (wgmma_tma_gemm_kernel: loaded by TMA from a producer "
                 "warp where a tap's channels fill 128 bytes); float16, bfloat16, float32 as TF32 when torch "
                 "allows it; C a multiple of 8 (4 in float32)"}});
  return rungs;
}

struct ConvParams {
  int64_t kernel_h, kernel_w, stride_h, stride_w, pad_h, pad_w, dilation_h, dilation_w;
};

// ---- the rules and the output's shape, stated once ----
// Every call checks its arguments here first; the Meta kernels (struct Meta below), which fake tensors run
// under torch.compile, are these functions alone. Sizes are SymInts: under dynamic shapes they are
// symbols, and a comparison becomes a guard on them. The window arguments (kernel_size, stride,
// padding, dilation) are int[2] in every schema: always plain ints.

// The rules every op shares: stride and dilation >= 1, padding >= 0, two entries each.
inline void check_window(at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation, const char* op) {
  check_pair(stride, op, "stride", 1);
  check_pair(padding, op, "padding", 0);
  check_pair(dilation, op, "dilation", 1);
}

// (out_h, out_w) of a kh x kw kernel sliding over the padded h x w input, which the dilated kernel must
// fit in; `kernel_arg` names the argument the kernel came from.
inline std::array<c10::SymInt, 2> window_output_size(const c10::SymInt& h, const c10::SymInt& w,
                                                     const c10::SymInt& kh, const c10::SymInt& kw,
                                                     at::IntArrayRef stride, at::IntArrayRef padding,
                                                     at::IntArrayRef dilation, const char* op,
                                                     const char* kernel_arg) {
  const c10::SymInt extent_h = conv::kernel_extent<c10::SymInt>(kh, dilation[0]);
  const c10::SymInt extent_w = conv::kernel_extent<c10::SymInt>(kw, dilation[1]);
  const c10::SymInt padded_h = h + 2 * padding[0], padded_w = w + 2 * padding[1];
  LABOPS_CHECK(extent_h <= padded_h && extent_w <= padded_w, "labops.", op, ": ", kernel_arg, " (", kh, ", ", kw,
               ") with dilation (", dilation[0], ", ", dilation[1], ") spans (", extent_h, ", ", extent_w,
               ") pixels: must not be larger than the padded input (", padded_h, ", ", padded_w, ")");
  return {conv::output_size<c10::SymInt>(h, kh, stride[0], padding[0], dilation[0]),
          conv::output_size<c10::SymInt>(w, kw, stride[1], padding[1], dilation[1])};
}

inline void check_image(const at::Tensor& x, const char* op, const char* arg) {
  check_floating(x, op, arg);
  LABOPS_CHECK(x.dim() == 3 || x.dim() == 4, "labops.", op, ": ", arg,
                    " must be 3-D (C, H, W) or 4-D (N, C, H, W), got ", x.dim(), "-D of shape ", x.sym_sizes());
}

// A size list argument (input_size, weight_size): every entry >= 0.
inline void check_sizes(c10::SymIntArrayRef sizes, const char* op, const char* arg) {
  for (const c10::SymInt& v : sizes) {
    LABOPS_CHECK(v >= 0, "labops.", op, ": ", arg, " must be >= 0, got ", sizes);
  }
}

// (out_h, out_w) of a convolution of an input of `input_size` ((C, H, W) or (N, C, H, W)) with a weight
// of `weight_size` (the argument `weight_arg` of the op: a tensor's sizes or a list).
inline std::array<c10::SymInt, 2> conv_output_hw(c10::SymIntArrayRef input_size, c10::SymIntArrayRef weight_size,
                                                 at::IntArrayRef stride, at::IntArrayRef padding,
                                                 at::IntArrayRef dilation, const char* op,
                                                 const char* weight_arg = "weight") {
  LABOPS_CHECK(weight_size.size() == 4, "labops.", op, ": ", weight_arg,
                    " must be 4-D (out_channels, in_channels, kH, kW), got ", weight_size.size(), "-D of shape ",
                    weight_size);
  const size_t c_dim = input_size.size() - 3;  // 0 for (C, H, W), 1 for (N, C, H, W)
  const c10::SymInt& c = input_size[c_dim];
  LABOPS_CHECK(weight_size[1] == c, "labops.", op, ": ", weight_arg, ".size(1) (in_channels) must equal ",
                    "the input's channels ", c, ", got ", weight_arg, " of shape ", weight_size,
                    " for input of shape ", input_size);
  LABOPS_CHECK(weight_size[2] >= 1 && weight_size[3] >= 1, "labops.", op, ": ", weight_arg,
                    " must have a kernel of at least 1x1, got shape ", weight_size);
  check_window(stride, padding, dilation, op);
  return window_output_size(input_size[c_dim + 1], input_size[c_dim + 2], weight_size[2], weight_size[3], stride,
                            padding, dilation, op, weight_arg);
}

// A convolution's output shape, ([N,] O, out_h, out_w), for an input of `input_size` ([N,] C, H, W).
inline c10::SymDimVector conv_output_shape(c10::SymIntArrayRef input_size, const c10::SymInt& out_channels,
                                           const std::array<c10::SymInt, 2>& out_hw) {
  c10::SymDimVector shape;
  if (input_size.size() == 4) shape.push_back(input_size[0]);
  shape.append({out_channels, out_hw[0], out_hw[1]});
  return shape;
}

inline void check_grad_output(const at::Tensor& grad_output, c10::SymIntArrayRef expected, const char* op) {
  LABOPS_CHECK(grad_output.sym_sizes() == expected, "labops.", op, ": grad_output must have the output's shape ",
                    expected, ", got ", grad_output.sym_sizes());
}

// A bias argument (bias, grad_bias): x's dtype and device, and shape (out_channels,).
inline void check_bias(const std::optional<at::Tensor>& bias, const at::Tensor& x, const c10::SymInt& out_channels,
                       const char* op, const char* arg, const char* rule) {
  if (!bias.has_value()) return;
  check_like(*bias, x, op, arg, "x");
  LABOPS_CHECK(bias->dim() == 1 && bias->sym_size(0) == out_channels, "labops.", op, ": ", arg,
                    " must have shape (", out_channels, ",) (", rule, "), got ", bias->sym_sizes());
}

// im2col: ([N,] C, H, W) -> ([N,] C*kH*kW, L), L = out_h * out_w.
inline c10::SymDimVector im2col_output_size(const at::Tensor& x, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation) {
  constexpr const char* op = "im2col";
  check_image(x, op, "x");
  check_pair(kernel_size, op, "kernel_size", 1);
  check_window(stride, padding, dilation, op);
  const auto [out_h, out_w] = window_output_size(x.sym_size(-2), x.sym_size(-1), kernel_size[0], kernel_size[1],
                                                 stride, padding, dilation, op, "kernel_size");
  c10::SymDimVector shape;
  if (x.dim() == 4) shape.push_back(x.sym_size(0));
  shape.append({x.sym_size(-3) * (kernel_size[0] * kernel_size[1]), out_h * out_w});
  return shape;
}

// col2im: ([N,] C*kH*kW, L) -> ([N,] C, H, W), (H, W) = output_size.
inline c10::SymDimVector col2im_output_size(const at::Tensor& cols, c10::SymIntArrayRef output_size,
                                            at::IntArrayRef kernel_size, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation) {
  constexpr const char* op = "col2im";
  check_floating(cols, op, "cols");
  LABOPS_CHECK(cols.dim() == 2 || cols.dim() == 3, "labops.col2im: cols must be 2-D (C*kH*kW, L) or 3-D ",
                    "(N, C*kH*kW, L), got ", cols.dim(), "-D of shape ", cols.sym_sizes());
  check_pair(kernel_size, op, "kernel_size", 1);
  check_window(stride, padding, dilation, op);
  check_pair(output_size, op, "output_size", 1);
  const bool batched = cols.dim() == 3;
  const int64_t area = kernel_size[0] * kernel_size[1];
  const c10::SymInt rows = cols.sym_size(-2), blocks = cols.sym_size(-1);
  LABOPS_CHECK(rows % area == 0, "labops.col2im: cols.size(", batched ? 1 : 0,
                    ") must be divisible by kernel_h * kernel_w = ", area, ", got ", rows);
  const auto [out_h, out_w] = window_output_size(output_size[0], output_size[1], kernel_size[0], kernel_size[1],
                                                 stride, padding, dilation, op, "kernel_size");
  LABOPS_CHECK(blocks == out_h * out_w, "labops.col2im: cols.size(", batched ? 2 : 1,
                    ") must equal the number of blocks ", out_h, " x ", out_w, " = ", out_h * out_w,
                    " that output_size ", output_size, " gives, got ", blocks);
  c10::SymDimVector shape;
  if (batched) shape.push_back(cols.sym_size(0));
  shape.append({rows / area, output_size[0], output_size[1]});
  return shape;
}

// conv2d_mm: ([N,] C, H, W) -> ([N,] O, out_h, out_w).
inline c10::SymDimVector conv2d_mm_output_size(const at::Tensor& x, const at::Tensor& weight,
                                               const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                                               at::IntArrayRef padding, at::IntArrayRef dilation) {
  constexpr const char* op = "conv2d_mm";
  check_image(x, op, "x");
  check_floating(weight, op, "weight");
  const auto out_hw = conv_output_hw(x.sym_sizes(), weight.sym_sizes(), stride, padding, dilation, op);
  check_like(weight, x, op, "weight", "x");
  const c10::SymInt out_channels = weight.sym_size(0);
  check_bias(bias, x, out_channels, op, "bias", "out_channels = weight.size(0)");
  return conv_output_shape(x.sym_sizes(), out_channels, out_hw);
}

// conv2d_mm_backward_input: the gradient of an input of input_size, its shape.
inline void check_conv2d_mm_backward_input(const at::Tensor& grad_output, const at::Tensor& weight,
                                           c10::SymIntArrayRef input_size, at::IntArrayRef stride,
                                           at::IntArrayRef padding, at::IntArrayRef dilation) {
  constexpr const char* op = "conv2d_mm_backward_input";
  check_floating(grad_output, op, "grad_output");
  LABOPS_CHECK(input_size.size() == 3 || input_size.size() == 4, "labops.", op,
                    ": input_size must have 3 (C, H, W) or 4 (N, C, H, W) values, got ", input_size);
  check_sizes(input_size, op, "input_size");
  check_floating(weight, op, "weight");
  const auto out_hw = conv_output_hw(input_size, weight.sym_sizes(), stride, padding, dilation, op);
  check_like(weight, grad_output, op, "weight", "grad_output");
  check_grad_output(grad_output, conv_output_shape(input_size, weight.sym_size(0), out_hw), op);
}

// conv2d_mm_acc_grad_parameters: in place, nothing returned.
inline void check_conv2d_mm_acc_grad_parameters(const at::Tensor& grad_output, const at::Tensor& x,
                                                const at::Tensor& grad_weight,
                                                const std::optional<at::Tensor>& grad_bias, at::IntArrayRef stride,
                                                at::IntArrayRef padding, at::IntArrayRef dilation) {
  constexpr const char* op = "conv2d_mm_acc_grad_parameters";
  check_image(x, op, "x");
  check_floating(grad_output, op, "grad_output");
  check_like(grad_output, x, op, "grad_output", "x");
  check_like(grad_weight, x, op, "grad_weight", "x");
  const auto out_hw = conv_output_hw(x.sym_sizes(), grad_weight.sym_sizes(), stride, padding, dilation, op,
                                     "grad_weight");
  const c10::SymInt out_channels = grad_weight.sym_size(0);
  check_grad_output(grad_output, conv_output_shape(x.sym_sizes(), out_channels, out_hw), op);
  check_bias(grad_bias, x, out_channels, op, "grad_bias", "grad_weight.size(0)");
}

// conv2d_mm_backward_weight: (grad_weight of weight_size, grad_bias of (weight_size[0],)).
inline void check_conv2d_mm_backward_weight(const at::Tensor& grad_output, const at::Tensor& x,
                                            c10::SymIntArrayRef weight_size, at::IntArrayRef stride,
                                            at::IntArrayRef padding, at::IntArrayRef dilation) {
  constexpr const char* op = "conv2d_mm_backward_weight";
  check_image(x, op, "x");
  check_floating(grad_output, op, "grad_output");
  check_like(grad_output, x, op, "grad_output", "x");
  check_sizes(weight_size, op, "weight_size");
  const auto out_hw = conv_output_hw(x.sym_sizes(), weight_size, stride, padding, dilation, op, "weight_size");
  check_grad_output(grad_output, conv_output_shape(x.sym_sizes(), weight_size[0], out_hw), op);
}

// The memory format of conv2d_mm's output, of the input gradient and of the weight gradient: F.conv2d's,
// channels_last where the tensor it follows (x; grad_output; x) is a channels_last batch of images, else
// contiguous. The Meta kernels ask it too, so a fake tensor has the strides of the real one.
inline at::MemoryFormat output_format(const at::Tensor& follows) {
  return follows.dim() == 4 ? follows.suggest_memory_format() : at::MemoryFormat::Contiguous;
}

// ---- the Meta kernels: the rules and the shapes above, nothing else ----
struct Meta {
  static at::Tensor im2col(const at::Tensor& x, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                           at::IntArrayRef padding, at::IntArrayRef dilation) {
    return at::empty_symint(im2col_output_size(x, kernel_size, stride, padding, dilation), x.options());
  }

  static at::Tensor col2im(const at::Tensor& cols, c10::SymIntArrayRef output_size, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
    return at::empty_symint(col2im_output_size(cols, output_size, kernel_size, stride, padding, dilation),
                            cols.options());
  }

  static at::Tensor conv2d_mm(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                              at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
    return at::empty_symint(conv2d_mm_output_size(x, weight, bias, stride, padding, dilation), x.options(),
                            output_format(x));
  }

  static at::Tensor conv2d_mm_backward_input(const at::Tensor& grad_output, const at::Tensor& weight,
                                             c10::SymIntArrayRef input_size, at::IntArrayRef stride,
                                             at::IntArrayRef padding, at::IntArrayRef dilation) {
    check_conv2d_mm_backward_input(grad_output, weight, input_size, stride, padding, dilation);
    return at::empty_symint(input_size, grad_output.options(), output_format(grad_output));
  }

  static void conv2d_mm_acc_grad_parameters(const at::Tensor& grad_output, const at::Tensor& x,
                                            const at::Tensor& grad_weight, const std::optional<at::Tensor>& grad_bias,
                                            at::IntArrayRef stride, at::IntArrayRef padding,
                                            at::IntArrayRef dilation, double /*scale*/) {
    check_conv2d_mm_acc_grad_parameters(grad_output, x, grad_weight, grad_bias, stride, padding, dilation);
  }

  static std::tuple<at::Tensor, at::Tensor> conv2d_mm_backward_weight(const at::Tensor& grad_output,
                                                                      const at::Tensor& x,
                                                                      c10::SymIntArrayRef weight_size,
                                                                      at::IntArrayRef stride, at::IntArrayRef padding,
                                                                      at::IntArrayRef dilation) {
    check_conv2d_mm_backward_weight(grad_output, x, weight_size, stride, padding, dilation);
    return {at::empty_symint(weight_size, grad_output.options(), output_format(x)),
            at::empty_symint(c10::SymIntArrayRef(weight_size[0]), grad_output.options())};
  }
};

// ---- the geometry the eager kernels run, from the checked, concrete sizes ----

inline ConvParams make_params(int64_t kernel_h, int64_t kernel_w, at::IntArrayRef stride, at::IntArrayRef padding,
                              at::IntArrayRef dilation) {
  return {kernel_h, kernel_w, stride[0], stride[1], padding[0], padding[1], dilation[0], dilation[1]};
}

// The geometry of N images of C x H x W, columns in (N, C*kH*kW, L) layout.
inline Im2colShape make_shape(int64_t n, int64_t c, int64_t h, int64_t w, const ConvParams& p) {
  Im2colShape s{n, c, h, w, p.kernel_h, p.kernel_w, p.stride_h, p.stride_w, p.pad_h, p.pad_w,
                p.dilation_h, p.dilation_w, 0, 0, 0, 0};
  s.out_h = conv::output_size(h, p.kernel_h, p.stride_h, p.pad_h, p.dilation_h);
  s.out_w = conv::output_size(w, p.kernel_w, p.stride_w, p.pad_w, p.dilation_w);
  s.col_row_stride = s.blocks();
  s.col_batch_stride = c * s.kernel_area() * s.blocks();
  return s;
}

// The geometry of a convolution of an input of `input_size` ((C, H, W) or (N, C, H, W)) with a
// kernel_h x kernel_w kernel.
inline Im2colShape conv_shape(at::IntArrayRef input_size, int64_t kernel_h, int64_t kernel_w, at::IntArrayRef stride,
                              at::IntArrayRef padding, at::IntArrayRef dilation) {
  const bool batched = input_size.size() == 4;
  const int64_t n = batched ? input_size[0] : 1;
  const int64_t c = input_size[batched ? 1 : 0], h = input_size[batched ? 2 : 1], w = input_size[batched ? 3 : 2];
  return make_shape(n, c, h, w, make_params(kernel_h, kernel_w, stride, padding, dilation));
}

// Note [column budget]
// How big `columns` gets: C*kH*kW x L per image, i.e. kH*kW times the input
// image (9x for 3x3 at stride 1). Batched GEMMs want all N images unfolded at
// once: for 32 x 64 x 56 x 56 with a 3x3 kernel that is 32 * 576 * 3136 =
// 58M elements (231 MB in float32). The batch is cut into chunks of at most
// kColumnBudgetBytes of columns, so memory stays bounded for any batch.
// When one image's columns alone pass the budget, the forward and the weight
// gradient cut the image into bands of output rows (see chunk_of). The input
// gradient cannot: col2im needs every tap of a pixel at once, so its chunks
// are whole images, at least one.
//
// A chunk: `images` images at a time, and of each `out_rows` output rows at a
// time (all of them unless images == 1).
struct Chunk {
  int64_t images, out_rows;
};

inline Chunk chunk_size(const Im2colShape& s, int64_t element_size, int64_t budget_bytes, bool whole_images) {
  const int64_t per_row = std::max<int64_t>(1, s.channels * s.kernel_area() * s.out_w * element_size);
  const int64_t per_image = per_row * std::max<int64_t>(1, s.out_h);
  if (whole_images || per_image <= budget_bytes) {
    return {std::max<int64_t>(1, std::min<int64_t>(s.batch, budget_bytes / per_image)), s.out_h};
  }
  return {1, std::max<int64_t>(1, std::min<int64_t>(s.out_h, budget_bytes / per_row))};
}

// Calls f(n0, images, oh0, out_rows) for every chunk of images x output rows.
template <typename F>
void for_each_chunk(const Im2colShape& s, Chunk c, F&& f) {
  for (int64_t n0 = 0; n0 < s.batch; n0 += c.images) {
    for (int64_t oh0 = 0; oh0 < s.out_h; oh0 += c.out_rows) {
      f(n0, std::min(c.images, s.batch - n0), oh0, std::min(c.out_rows, s.out_h - oh0));
    }
  }
}

// Note [chunks in parallel]
// On the CPU the chunks are shared out among the threads: each thread unfolds
// its chunks into its own columns buffer and multiplies them itself (ATen ops,
// the GEMM included, run single-threaded inside at::parallel_for). That is one
// parallel region per call instead of two per chunk (im2col's, the GEMM's).
// Every region ends by waiting for its slowest thread, and on a machine shared
// with other jobs a thread that has lost its core costs a scheduler time
// slice: measured on 4 x 64 x 56 x 56, forward in 28 bands of 1 MB, 440 ms per
// call with a region per step while another job held one of the two cores,
// against 40 ms for F.conv2d. On a GPU the chunks run in order on the stream.
//
// How many chunks may run at once: one per thread on the CPU, one on a GPU.
// Each slot gets its own columns buffer (and, for the weight gradient, its own
// partial sum).
inline int64_t chunk_slots(const at::Tensor& like) { return like.is_cpu() ? at::get_num_threads() : 1; }

// Calls f(n0, images, oh0, out_rows, slot) for every chunk; no two chunks
// running at the same time share a slot (0 <= slot < chunk_slots(like)).
template <typename F>
void run_chunks(const Im2colShape& s, Chunk c, const at::Tensor& like, F&& f) {
  std::vector<std::array<int64_t, 4>> chunks;
  for_each_chunk(s, c, [&](int64_t n0, int64_t nb, int64_t oh0, int64_t out_rows) {
    chunks.push_back({n0, nb, oh0, out_rows});
  });
  const int64_t count = static_cast<int64_t>(chunks.size()), slots = chunk_slots(like);
  if (slots == 1 || count < slots) {  // a GPU, or too few chunks to go round: in order, each op parallel inside
    for (const auto& k : chunks) f(k[0], k[1], k[2], k[3], int64_t(0));
    return;
  }
  // The workers run with this thread's dispatch state (the op runs below autograd).
  const at::ThreadLocalState caller_state;
  at::parallel_for(0, count, 1, [&](int64_t begin, int64_t end) {
    at::ThreadLocalStateGuard same_state(caller_state);
    const int64_t slot = at::get_thread_num();
    for (int64_t i = begin; i < end; ++i) f(chunks[i][0], chunks[i][1], chunks[i][2], chunks[i][3], slot);
  });
}

// The geometry of output rows [oh0, oh0 + out_rows) of `images` images, with
// their columns in (images, C*kH*kW, out_rows * out_w) layout. A band of
// output rows is the same convolution with the top padding moved down by
// oh0 * stride_h rows: input_coord(oh, kh) then reads the row that
// input_coord(oh0 + oh, kh) reads in the whole image.
inline Im2colShape chunk_of(Im2colShape s, int64_t images, int64_t oh0, int64_t out_rows) {
  s.batch = images;
  s.pad_h -= oh0 * s.stride_h;
  s.out_h = out_rows;
  s.col_row_stride = s.blocks();
  s.col_batch_stride = s.channels * s.kernel_area() * s.blocks();
  return s;
}

// Elements [offset, offset + numel) of slot `slot` of the buffer (slots, size), as a contiguous tensor of
// `sizes` (chunks at the end of a batch or an image are smaller than the buffer). One view op, as_strided,
// whatever the slot: each op through the dispatcher costs more host time than a small convolution's
// kernels (tools/host_time.py).
inline at::Tensor slot_view(const at::Tensor& buffer, int64_t slot, at::IntArrayRef sizes, int64_t offset = 0) {
  std::vector<int64_t> strides(sizes.size(), 1);
  for (int64_t i = static_cast<int64_t>(sizes.size()) - 2; i >= 0; --i) strides[i] = strides[i + 1] * sizes[i + 1];
  return buffer.as_strided(sizes, strides, buffer.storage_offset() + slot * buffer.stride(0) + offset);
}

// t.narrow(dim, start, length), or t itself (no op) when that is all of t.
inline at::Tensor narrow_or_all(const at::Tensor& t, int64_t dim, int64_t start, int64_t length) {
  return start == 0 && length == t.size(dim) ? t : t.narrow(dim, start, length);
}

// out = t summed over dims, written into out (no new tensor).
inline void sum_into(at::Tensor out, const at::Tensor& t, at::IntArrayRef dims) {
  at::sum_out(out, t, at::OptionalIntArrayRef(dims));
}

template <typename Launcher>
struct Entry {
  // ---- im2col == F.unfold ----
  static at::Tensor im2col(const at::Tensor& x, at::IntArrayRef kernel_size, at::IntArrayRef stride,
                           at::IntArrayRef padding, at::IntArrayRef dilation) {
    im2col_output_size(x, kernel_size, stride, padding, dilation);  // the rules
    const bool batched = x.dim() == 4;
    at::Tensor x4 = (batched ? x : x.unsqueeze(0)).contiguous();
    const Im2colShape s = make_shape(x4.size(0), x4.size(1), x4.size(2), x4.size(3),
                                     make_params(kernel_size[0], kernel_size[1], stride, padding, dilation));
    c10::OptionalDeviceGuard guard(x.device());
    at::Tensor cols = labops::empty({s.batch, s.channels * s.kernel_area(), s.blocks()}, x4.options());
    if (cols.numel() > 0) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "labops_im2col", [&] {
        Launcher::im2col(s, x4.const_data_ptr<scalar_t>(), cols.mutable_data_ptr<scalar_t>());
      });
    }
    return batched ? cols : cols.squeeze(0);
  }

  // ---- col2im == F.fold: the adjoint of im2col (sums overlaps) ----
  static at::Tensor col2im(const at::Tensor& cols, at::IntArrayRef output_size, at::IntArrayRef kernel_size,
                           at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
    // output_size is SymInt[]: this kernel gets concrete ints from the dispatcher, SymInts as they are (no copy).
    col2im_output_size(cols, c10::fromIntArrayRefSlow(output_size), kernel_size, stride, padding, dilation);
    const bool batched = cols.dim() == 3;
    at::Tensor c3 = (batched ? cols : cols.unsqueeze(0)).contiguous();
    const ConvParams p = make_params(kernel_size[0], kernel_size[1], stride, padding, dilation);
    const Im2colShape s = make_shape(c3.size(0), c3.size(1) / (p.kernel_h * p.kernel_w), output_size[0],
                                     output_size[1], p);
    c10::OptionalDeviceGuard guard(cols.device());
    at::Tensor image = labops::empty({s.batch, s.channels, s.height, s.width}, c3.options());
    if (image.numel() > 0) {
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, cols.scalar_type(), "labops_col2im", [&] {
        Launcher::col2im(s, c3.const_data_ptr<scalar_t>(), image.mutable_data_ptr<scalar_t>());
      });
    }
    return batched ? image : image.squeeze(0);
  }

  // ---- conv2d_mm: updateOutput ----
  // out[n] = W (O x C*kH*kW) . columns[n] (C*kH*kW x L) + bias, one batched
  // GEMM per chunk of images (W broadcast over the batch with stride 0), or
  // per band of output rows when an image passes the budget (the GEMM then
  // writes that band's columns of out[n], a strided view). See Note [chunks
  // in parallel] for who runs which chunk. That is rung 2 (im2col_gemm) of the
  // forward's ladder; rung 1 (textbook), when forced, sums each output directly, and
  // rung 3 (implicit_gemm, CUDA only) runs the same GEMM without the columns, rung 4 (tensor_cores,
  // CUDA only) that GEMM on tensor cores, and rung 5 (wgmma, Hopper only) on Hopper's. Rungs 1 to 3 read x
  // as NCHW (a channels_last x is made contiguous first), rungs 4 and 5 as channels_last. The output is
  // channels_last where x is (output_format): rungs 4 and 5 write it so, the others write NCHW, copied.
  static at::Tensor conv2d_mm(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                              at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
    conv2d_mm_output_size(x, weight, bias, stride, padding, dilation);  // the rules
    const Im2colShape s = conv_shape(x.sizes(), weight.size(2), weight.size(3), stride, padding, dilation);
    const int64_t O = weight.size(0);
    c10::OptionalDeviceGuard guard(x.device());
    const int64_t rows = s.channels * s.kernel_area(), L = s.blocks();
    // The rung (forward_ladder), asked only when a kernel runs: an empty output records nothing. Asked
    // before x is copied, so a forced rung that refuses the input has cost no copy.
    const bool runs = s.batch * O * L > 0;
    const int rung = runs ? Launcher::forward_rung(forward_ladder().forced(), s, O, x.scalar_type()) : 0;
    const at::MemoryFormat format = output_format(x);
    at::Tensor out = labops::empty({s.batch, O, s.out_h, s.out_w}, x.options(),
                               rung >= 4 ? format : at::MemoryFormat::Contiguous);
    at::Tensor x4 = x.dim() == 4 ? x : x.unsqueeze(0);
    if (rung < 4) x4 = x4.contiguous();  // rungs 1 to 3 read x as NCHW; 4 and 5 as channels_last, from any layout
    if (rung >= 4) {
      if constexpr (Launcher::kImplicitGemm) {  // a device without rungs 4 and 5 never gets here (Ladder::run)
        Launcher::forward_tensor_cores(s, x4, weight, bias.has_value() ? bias->contiguous() : at::Tensor(), out,
                                       rung == 5);
      }
    } else if (rung == 1 || rung == 3) {  // no columns: the textbook (forward_at per output), or the implicit GEMM
      const at::Tensor wc = weight.contiguous();
      const at::Tensor bc = bias.has_value() ? bias->contiguous() : at::Tensor();
      AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "labops_conv2d_mm_direct", [&] {
        const scalar_t* b = bc.defined() ? bc.const_data_ptr<scalar_t>() : nullptr;
        if (rung == 1) {
          Launcher::forward_textbook(s, x4.const_data_ptr<scalar_t>(), wc.const_data_ptr<scalar_t>(), b, O,
                                     out.mutable_data_ptr<scalar_t>());
        } else if constexpr (Launcher::kImplicitGemm) {  // a device without rung 3 never gets here (Ladder::run)
          Launcher::forward_implicit_gemm(s, x4.const_data_ptr<scalar_t>(), wc.const_data_ptr<scalar_t>(), b, O,
                                          out.mutable_data_ptr<scalar_t>());
        }
      });
    } else if (rung == 2) {  // im2col + GEMM
      at::Tensor w2 = weight.reshape({O, rows});
      at::Tensor out3 = out.view({s.batch, O, L});
      const Chunk chunk = chunk_size(s, x.element_size(), Launcher::kColumnBudgetBytes, false);
      at::Tensor cols = labops::empty({chunk_slots(x4), chunk.images * rows * chunk.out_rows * s.out_w}, x4.options());
      run_chunks(s, chunk, x4, [&](int64_t n0, int64_t nb, int64_t oh0, int64_t out_rows, int64_t slot) {
        const Im2colShape sc = chunk_of(s, nb, oh0, out_rows);
        const int64_t Lc = sc.blocks();
        at::Tensor cols_n = slot_view(cols, slot, {nb, rows, Lc});
        unfold_into(sc, narrow_or_all(x4, 0, n0, nb), cols_n);
        Launcher::gemm_forward(narrow_or_all(narrow_or_all(out3, 0, n0, nb), 2, oh0 * s.out_w, Lc), w2, cols_n,
                               bias);
      });
    }
    if (x.dim() == 3) return out.squeeze(0);
    return format == at::MemoryFormat::Contiguous ? out : out.contiguous(format);  // rungs 1 to 3 wrote NCHW
  }

  // ---- conv2d_mm_backward_input: updateGradInput ----
  // grad_columns[n] = W^T . grad_output[n], then col2im sums them into the image.
  static at::Tensor conv2d_mm_backward_input(const at::Tensor& grad_output, const at::Tensor& weight,
                                             at::IntArrayRef input_size, at::IntArrayRef stride,
                                             at::IntArrayRef padding, at::IntArrayRef dilation) {
    check_conv2d_mm_backward_input(grad_output, weight, as_sym_sizes(input_size), stride, padding, dilation);
    const Im2colShape s = conv_shape(input_size, weight.size(2), weight.size(3), stride, padding, dilation);
    const int64_t O = weight.size(0);
    c10::OptionalDeviceGuard guard(grad_output.device());
    const int64_t rows = s.channels * s.kernel_area(), L = s.blocks();
    const at::MemoryFormat format = output_format(grad_output);
    at::Tensor grad_input = labops::empty({s.batch, s.channels, s.height, s.width}, grad_output.options(), format);
    bool done = false;  // on CUDA at stride 1, by the tensor cores: Note [the input gradient as a convolution]
    if constexpr (Launcher::kImplicitGemm) {
      done = grad_input.numel() > 0 && Launcher::backward_input_as_convolution(
                                           s, grad_output.reshape({s.batch, O, s.out_h, s.out_w}), weight, grad_input);
    }
    if (grad_input.numel() > 0 && !done) {
      // The columns and col2im write NCHW: into grad_input itself, or into a copy where it is channels_last.
      const at::Tensor result = grad_input.is_contiguous() ? grad_input
                                                           : labops::empty(grad_input.sizes(), grad_input.options());
      at::Tensor g3 = grad_output.reshape({s.batch, O, L});
      at::Tensor w2 = weight.reshape({O, rows});
      const Chunk chunk = chunk_size(s, grad_output.element_size(), Launcher::kColumnBudgetBytes, true);
      at::Tensor cols = labops::empty({chunk_slots(grad_output), chunk.images * rows * L}, grad_output.options());
      run_chunks(s, chunk, grad_output, [&](int64_t n0, int64_t nb, int64_t, int64_t, int64_t slot) {
        at::Tensor cols_n = slot_view(cols, slot, {nb, rows, L});
        Launcher::gemm_backward_input(cols_n, w2, narrow_or_all(g3, 0, n0, nb));
        fold_into(chunk_of(s, nb, 0, s.out_h), cols_n, narrow_or_all(result, 0, n0, nb));
      });
      if (!result.is_same(grad_input)) grad_input.copy_(result);
    }
    return input_size.size() == 4 ? grad_input : grad_input.squeeze(0);
  }

  // ---- conv2d_mm_acc_grad_parameters: accGradParameters ----
  // grad_weight += scale * sum_n grad_output[n] . columns[n]^T and
  // grad_bias += scale * sum over n, oh, ow of grad_output. The columns of a
  // chunk are written as one (C*kH*kW) x (nb*L) matrix, so the sum over images
  // is the inner dimension of a single GEMM that accumulates (beta = 1).
  // A band of output rows of one image is a (C*kH*kW) x (rows * out_w) chunk
  // like any other, read against the same band of grad_output.
  static void conv2d_mm_acc_grad_parameters(const at::Tensor& grad_output, const at::Tensor& x,
                                            const at::Tensor& grad_weight, const std::optional<at::Tensor>& grad_bias,
                                            at::IntArrayRef stride, at::IntArrayRef padding,
                                            at::IntArrayRef dilation, double scale) {
    check_conv2d_mm_acc_grad_parameters(grad_output, x, grad_weight, grad_bias, stride, padding, dilation);
    const Im2colShape s = conv_shape(x.sizes(), grad_weight.size(2), grad_weight.size(3), stride, padding, dilation);
    const int64_t O = grad_weight.size(0);
    c10::OptionalDeviceGuard guard(x.device());
    const int64_t rows = s.channels * s.kernel_area(), L = s.blocks();
    if (s.batch * L == 0) return;  // sums over nothing add nothing
    if (grad_weight.numel() == 0) {
      if (grad_bias.has_value()) {
        grad_bias->add_(grad_output.reshape({s.batch, O, L}).sum(at::IntArrayRef{0, 2}), scale);
      }
      return;
    }
    // Accumulate in place when grad_weight is dense, contiguous or channels_last, else through a temporary.
    const bool in_place = grad_weight.is_contiguous() || grad_weight.is_contiguous(at::MemoryFormat::ChannelsLast);
    at::Tensor gw4 = in_place ? grad_weight : labops::empty(grad_weight.sizes(), grad_weight.options());
    // The bias gradient is summed as backward_weight sums it, so both give the same bits.
    at::Tensor bias_sum = grad_bias.has_value() ? labops::empty({O}, grad_bias->options()) : at::Tensor();
    weight_gradient(s, grad_output, x, gw4, scale, in_place ? 1.0 : 0.0, bias_sum);
    if (!in_place) grad_weight.add_(gw4);
    if (grad_bias.has_value()) grad_bias->add_(bias_sum, scale);
  }

  // ---- conv2d_mm_backward_weight: the weight and bias gradients, for autograd ----
  // accGradParameters at scale 1 into new tensors, as one op. The first GEMM writes grad_weight
  // (beta = 0; the GPU launcher clears it with a memset instead of an ATen op), and on a GPU the bias
  // gradient is summed by the kernel that lays grad_output out for that GEMM. Zeros, an accumulating op,
  // a transposing copy and a sum would be four ops: on a small input each costs more host time than its
  // kernel (tools/host_pieces.py).
  static std::tuple<at::Tensor, at::Tensor> conv2d_mm_backward_weight(const at::Tensor& grad_output,
                                                                     const at::Tensor& x, at::IntArrayRef weight_size,
                                                                     at::IntArrayRef stride, at::IntArrayRef padding,
                                                                     at::IntArrayRef dilation) {
    check_conv2d_mm_backward_weight(grad_output, x, as_sym_sizes(weight_size), stride, padding, dilation);
    const Im2colShape s = conv_shape(x.sizes(), weight_size[2], weight_size[3], stride, padding, dilation);
    const int64_t O = weight_size[0];
    c10::OptionalDeviceGuard guard(x.device());
    const int64_t rows = s.channels * s.kernel_area(), L = s.blocks();
    at::Tensor grad_weight = labops::empty(weight_size, grad_output.options(), output_format(x));
    at::Tensor grad_bias = labops::empty({O}, grad_output.options());
    if (s.batch * L == 0) return {grad_weight.zero_(), grad_bias.zero_()};  // sums over nothing
    if (grad_weight.numel() == 0) {
      sum_into(grad_bias, grad_output.contiguous().view({s.batch, O, L}), {0, 2});
      return {grad_weight, grad_bias};
    }
    weight_gradient(s, grad_output, x, grad_weight, 1.0, 0.0, grad_bias);
    return {grad_weight, grad_bias};
  }

 private:
  // The weight gradient both accGradParameters and backward_weight compute: gw4 (O, C, kH, kW), contiguous or
  // channels_last, = beta * gw4 + scale * the gradient, with beta 1 (accumulate) or 0 (gw4 is new: nothing
  // reads it). The tensor cores' weight gradients (by taps, or as a convolution) write either layout; the
  // columns write an (O, rows) matrix, so a channels_last gw4 gets theirs through a contiguous temporary.
  static void weight_gradient(const Im2colShape& s, const at::Tensor& grad_output, const at::Tensor& x,
                              const at::Tensor& gw4, double scale, double beta, const at::Tensor& bias_sum) {
    if constexpr (Launcher::kImplicitGemm) {  // on CUDA, by the tensor cores: no columns, from either layout
      const at::Tensor g4 = grad_output.reshape({s.batch, gw4.size(0), s.out_h, s.out_w});
      const at::Tensor x4 = x.dim() == 4 ? x : x.unsqueeze(0);
      if (Launcher::backward_weight_by_taps(s, g4, x4, gw4, scale, beta, bias_sum)) return;
      if (Launcher::backward_weight_as_convolution(s, g4, x4, gw4, scale, beta, bias_sum)) return;
    }
    const int64_t O = gw4.size(0), rows = gw4.numel() / O;
    if (gw4.is_contiguous()) return weight_gradient_rows(s, grad_output, x, gw4.view({O, rows}), scale, beta, bias_sum);
    const at::Tensor gw2 = labops::empty({O, rows}, gw4.options());
    weight_gradient_rows(s, grad_output, x, gw2, scale, 0.0, bias_sum);
    if (beta == 0.0) gw4.copy_(gw2.view(gw4.sizes()));
    else gw4.add_(gw2.view(gw4.sizes()));
  }

  // gw2 (O, rows) = beta * gw2 + scale * sum_n grad_output[n] . columns[n]^T, with beta 1 (accumulate) or 0
  // (gw2 is new: the first GEMM writes it, nothing reads it). The columns of a chunk are written as one
  // (C*kH*kW) x (nb*Lc) matrix, so the sum over images is the inner dimension of a single GEMM; grad_output's
  // rows are laid out to match, (O, nb*Lc). A band of output rows of one image is a chunk like any other, read
  // against the same band of grad_output.
  // When bias_sum is defined it gets the bias gradient at scale 1 (grad_output summed over n, oh, ow):
  // from gather_rows as it lays grad_output out, where the launcher does that (the GPU, whose chunks run
  // in order), else from one ATen sum.
  static void weight_gradient_rows(const Im2colShape& s, const at::Tensor& grad_output, const at::Tensor& x,
                                   const at::Tensor& gw2, double scale, double beta, const at::Tensor& bias_sum) {
    const int64_t O = gw2.size(0), rows = gw2.size(1), L = s.blocks();
    const at::Tensor x_batch = x.dim() == 4 ? x : x.unsqueeze(0);
    // Contiguous: the launchers read grad_output's rows with unit stride (gather_rows, the GEMM).
    const at::Tensor g3 = Launcher::contiguous(grad_output).view({s.batch, O, L});
    const at::Tensor x4 = Launcher::contiguous(x_batch);
    const Chunk chunk = chunk_size(s, x4.element_size(), Launcher::kColumnBudgetBytes, false);
    const int64_t slots = chunk_slots(x4), chunk_cols = chunk.images * chunk.out_rows * s.out_w;
    // Each slot holds a chunk's columns, then its grad_output rows (needed when it has several images).
    const int64_t grad_rows_size = chunk.images > 1 ? O * chunk_cols : 0;
    at::Tensor buffer = labops::empty({slots, rows * chunk_cols + grad_rows_size}, x4.options());
    // Chunks running at once add into separate sums, added up at the end.
    at::Tensor sums = slots == 1 ? at::Tensor() : at::zeros({slots, O, rows}, gw2.options());
    const bool gather_bias = bias_sum.defined() && Launcher::kSumsBiasWhileGathering && slots == 1;
    run_chunks(s, chunk, x4, [&](int64_t n0, int64_t nb, int64_t oh0, int64_t out_rows, int64_t slot) {
      const bool first = n0 == 0 && oh0 == 0;  // with one slot, the chunk that runs first
      Im2colShape sc = chunk_of(s, nb, oh0, out_rows);
      const int64_t Lc = sc.blocks();
      sc.col_row_stride = nb * Lc;  // (rows, nb * Lc): image n's block starts at column n * Lc
      sc.col_batch_stride = Lc;
      at::Tensor cols_n = slot_view(buffer, slot, {rows, nb * Lc});
      unfold_into(sc, narrow_or_all(x4, 0, n0, nb), cols_n);
      // (nb, O, Lc) -> (O, nb * Lc): a copy 1/(kH*kW) of the columns' size when O == C; for a single
      // image, grad_output's own (O, Lc) rows, read in place.
      at::Tensor g_chunk = narrow_or_all(narrow_or_all(g3, 0, n0, nb), 2, oh0 * s.out_w, Lc);
      at::Tensor g_rows = nb > 1 ? slot_view(buffer, slot, {O, nb * Lc}, rows * chunk_cols)
                                 : g_chunk.as_strided({O, Lc}, {g_chunk.stride(1), 1}, g_chunk.storage_offset());
      Launcher::gather_rows(g_chunk, nb > 1 ? g_rows : at::Tensor(), gather_bias ? bias_sum : at::Tensor(), !first);
      const bool write = slots == 1 && first && beta == 0.0;
      Launcher::gemm_acc_grad_weight(slots == 1 ? gw2 : sums.select(0, slot), g_rows, cols_n, scale,
                                     write ? 0.0 : 1.0);
    });
    if (slots > 1) {
      if (beta == 0.0) sum_into(gw2, sums, {0});
      else gw2.add_(sums.sum(0));
    }
    if (bias_sum.defined() && !gather_bias) sum_into(bias_sum, g3, {0, 2});
  }

  // im2col of the contiguous images x (nb, C, H, W) into cols (layout from s).
  static void unfold_into(const Im2colShape& s, const at::Tensor& x, const at::Tensor& cols) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "labops_im2col", [&] {
      Launcher::im2col(s, x.const_data_ptr<scalar_t>(), cols.mutable_data_ptr<scalar_t>());
    });
  }

  // col2im of cols (nb, rows, L) into the contiguous images (nb, C, H, W).
  static void fold_into(const Im2colShape& s, const at::Tensor& cols, const at::Tensor& image) {
    AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, cols.scalar_type(), "labops_col2im", [&] {
      Launcher::col2im(s, cols.const_data_ptr<scalar_t>(), image.mutable_data_ptr<scalar_t>());
    });
  }
};

// Every op of the layer with its kernel in `Kernels`: Entry<Launcher> on a device (cpu.cpp, cuda.cu),
// Meta for fake tensors (register.cpp). One list, so no op lacks a kernel on one dispatch key.
template <typename Kernels, typename Module>
void register_kernels(Module& m) {
  m.impl("im2col", &Kernels::im2col).impl("col2im", &Kernels::col2im).impl("conv2d_mm", &Kernels::conv2d_mm)
      .impl("conv2d_mm_backward_input", &Kernels::conv2d_mm_backward_input)
      .impl("conv2d_mm_acc_grad_parameters", &Kernels::conv2d_mm_acc_grad_parameters)
      .impl("conv2d_mm_backward_weight", &Kernels::conv2d_mm_backward_weight);
}

}  // namespace labops::conv2d_mm
