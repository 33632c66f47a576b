// Tensor-level entry points of depthwise_conv2d and its three backward ops,
// written once and instantiated per launcher: depthwise/cpu.cpp uses
// Entry<cpu::DepthwiseLauncher> (and Entry<cpu::DepthwiseTextbookLauncher>
// for the private textbook op), depthwise/cuda.cu uses
// Entry<cuda::DepthwiseLauncher>. Here live the argument checks, the
// shapes, contiguity, allocation and the dtype dispatch; the launchers only
// receive raw pointers and a checked Geometry. The forward reads its forced
// rung (forward_ladder below) once and hands it to the launcher, which picks
// the rung and its layout from it.
#pragma once

#include <array>
#include <optional>

#include <ATen/Dispatch.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/core/DeviceGuard.h>
#include <c10/core/SymIntArrayRef.h>
#include <c10/util/DimVector.h>

#include "../common/check.h"
#include "../common/empty.h"
#include "../common/ladder.h"
#include "depthwise.h"

namespace labops::depthwise {

// The forward's rungs (Note [the ladder], common/ladder.h), rung 1 the textbook body forward_at.
// Which rung runs by default: labops/ladder.py DEFAULTS, docs/layers/depthwise.md "The ladder".
// The backward ops have no rungs: forcing one changes the forward only.
inline ladder::Ladder& forward_ladder() {
  static ladder::Ladder rungs(
      "depthwise", "depthwise_conv2d",
      {{"textbook", "forward_at per output element (DepthwiseTextbookLauncher), elements shared among the threads"},
       {"bordered_simd", "a zero-bordered copy of each plane, every tap one SIMD multiply-add over a row "
                         "(Note [zero-bordered planes])"}},
      {{"textbook", "forward_generic_kernel: forward_at per output element, grid-stride loop; any geometry, NCHW"},
       {"tiled", "a thread computes a 4x2 tile of outputs from registers (Note [tiled kernels]); 3x3 and 5x5, "
                 "stride 1 or 2, dilation 1; NCHW, or channels_last in packs of channels"},
       {"tiled_vector_rows", "the tiled kernels reading rows 2 or 4 columns per load (Note [vector row loads]); "
                             "NCHW, 'same' padding in W, even widths"}});
  return rungs;
}

// ---- the rules and the output's shape, stated once ----
// Every call checks its arguments here first; the Meta kernels (below, registered in register.cpp), which
// fake tensors run under torch.compile, are these functions alone. Sizes are SymInts: under dynamic shapes
// they are symbols, and a comparison becomes a guard on them. stride, padding and dilation are int[2] in
// every schema: always plain ints.

// Checks every size rule and returns the forward output's shape (N, C_out, out_h, out_w). x_size is
// (N, C_in, H, W), w_size is (C_out, 1, kH, kW); the *_arg names say where each came from so the
// message names the argument the caller actually passed.
inline std::array<c10::SymInt, 4> check_geometry(const char* op, c10::SymIntArrayRef x_size, const char* x_arg,
                                                 c10::SymIntArrayRef w_size, const char* w_arg,
                                                 at::IntArrayRef stride, at::IntArrayRef padding,
                                                 at::IntArrayRef dilation) {
  LABOPS_CHECK(x_size.size() == 4, "labops.", op, ": ", x_arg,
                    " must be 4-D (N, C_in, H, W), got ", x_size.size(), "-D");
  LABOPS_CHECK(w_size.size() == 4, "labops.", op, ": ", w_arg,
                    " must be 4-D (C_out, 1, kH, kW), got ", w_size.size(), "-D");
  check_pair(stride, op, "stride", 1);
  check_pair(padding, op, "padding", 0);
  check_pair(dilation, op, "dilation", 1);
  for (const c10::SymInt& v : x_size) {
    LABOPS_CHECK(v >= 0, "labops.", op, ": ", x_arg, " sizes must be non-negative, got ", x_size);
  }
  const c10::SymInt &c_in = x_size[1], &c_out = w_size[0];
  LABOPS_CHECK(c_in >= 1, "labops.", op, ": ", x_arg, " must have at least one channel, got ", x_size);
  LABOPS_CHECK(w_size[1] == 1, "labops.", op, ": ", w_arg,
                    ".size(1) must be 1 (one input channel per group), got ", w_size[1]);
  LABOPS_CHECK(c_out >= 1 && c_out % c_in == 0, "labops.", op, ": ", w_arg,
                    ".size(0) (C_out) must be a positive multiple of C_in = ", c_in, ", got ", c_out);
  LABOPS_CHECK(w_size[2] >= 1 && w_size[3] >= 1, "labops.", op, ": ", w_arg,
                    " must have a kernel of at least 1x1, got ", w_size[2], "x", w_size[3]);
  const c10::SymInt out_h = conv::output_size<c10::SymInt>(x_size[2], w_size[2], stride[0], padding[0], dilation[0]);
  const c10::SymInt out_w = conv::output_size<c10::SymInt>(x_size[3], w_size[3], stride[1], padding[1], dilation[1]);
  LABOPS_CHECK(out_h >= 1 && out_w >= 1, "labops.", op,
                    ": the dilated kernel must fit in the padded input: kernel ", w_size[2], "x", w_size[3],
                    ", dilation ", dilation, ", input ", x_size[2], "x", x_size[3], ", padding ", padding,
                    " give an output of ", out_h, "x", out_w);
  return {x_size[0], c_out, out_h, out_w};
}

inline void check_grad_output(const at::Tensor& grad_output, c10::SymIntArrayRef want, const char* op) {
  LABOPS_CHECK(grad_output.sym_sizes() == want, "labops.", op, ": grad_output must have the forward output's shape ",
                    want, ", got ", grad_output.sym_sizes());
}

// The checks both gradient ops share: grad_output floating, `other` (the
// weight or x) of its dtype and device, the geometry, and grad_output of the
// forward output's shape.
inline void check_backward(const char* op, const at::Tensor& grad_output, const at::Tensor& other,
                           const char* other_arg, c10::SymIntArrayRef x_size, const char* x_arg,
                           c10::SymIntArrayRef w_size, const char* w_arg, at::IntArrayRef stride,
                           at::IntArrayRef padding, at::IntArrayRef dilation) {
  check_floating(grad_output, op, "grad_output");
  check_like(other, grad_output, op, other_arg, "grad_output");
  check_grad_output(grad_output, check_geometry(op, x_size, x_arg, w_size, w_arg, stride, padding, dilation), op);
}

// depthwise_conv2d: (N, C_in, H, W) -> (N, C_out, out_h, out_w).
inline std::array<c10::SymInt, 4> depthwise_conv2d_output_size(const at::Tensor& x, const at::Tensor& weight,
                                                               const std::optional<at::Tensor>& bias,
                                                               at::IntArrayRef stride, at::IntArrayRef padding,
                                                               at::IntArrayRef dilation) {
  constexpr const char* op = "depthwise_conv2d";
  check_floating(x, op, "x");
  check_like(weight, x, op, "weight", "x");
  const std::array<c10::SymInt, 4> out =
      check_geometry(op, x.sym_sizes(), "x", weight.sym_sizes(), "weight", stride, padding, dilation);
  if (bias.has_value() && bias->defined()) {
    check_like(*bias, x, op, "bias", "x");
    LABOPS_CHECK(bias->dim() == 1 && bias->sym_size(0) == out[1], "labops.", op,
                      ": bias must have shape (C_out,) = (", out[1], ",), got ", bias->sym_sizes());
  }
  return out;
}

// depthwise_conv2d_backward_input: the gradient of an input of input_size.
inline void check_depthwise_conv2d_backward_input(const at::Tensor& grad_output, const at::Tensor& weight,
                                                  c10::SymIntArrayRef input_size, at::IntArrayRef stride,
                                                  at::IntArrayRef padding, at::IntArrayRef dilation) {
  check_backward("depthwise_conv2d_backward_input", grad_output, weight, "weight", input_size, "input_size",
                 weight.sym_sizes(), "weight", stride, padding, dilation);
}

// depthwise_conv2d_backward_weight, and acc_grad_parameters' weight: a gradient of weight_size.
inline void check_weight_gradient(const char* op, const at::Tensor& grad_output, const at::Tensor& x,
                                  c10::SymIntArrayRef weight_size, at::IntArrayRef stride, at::IntArrayRef padding,
                                  at::IntArrayRef dilation) {
  check_backward(op, grad_output, x, "x", x.sym_sizes(), "x", weight_size, "weight_size", stride, padding, dilation);
}

// depthwise_conv2d_backward_bias: (N, C_out, outH, outW) -> (C_out,).
inline c10::SymInt depthwise_conv2d_backward_bias_size(const at::Tensor& grad_output) {
  constexpr const char* op = "depthwise_conv2d_backward_bias";
  check_floating(grad_output, op, "grad_output");
  LABOPS_CHECK(grad_output.dim() == 4, "labops.", op,
                    ": grad_output must be 4-D (N, C_out, outH, outW), got ", grad_output.dim(),
                    "-D");
  return grad_output.sym_size(1);
}

// depthwise_conv2d_acc_grad_parameters: in place, nothing returned.
inline void check_depthwise_conv2d_acc_grad_parameters(const at::Tensor& grad_output, const at::Tensor& x,
                                                       const at::Tensor& grad_weight,
                                                       const std::optional<at::Tensor>& grad_bias,
                                                       at::IntArrayRef stride, at::IntArrayRef padding,
                                                       at::IntArrayRef dilation) {
  constexpr const char* op = "depthwise_conv2d_acc_grad_parameters";
  check_like(grad_weight, x, op, "grad_weight", "x");
  check_weight_gradient(op, grad_output, x, grad_weight.sym_sizes(), stride, padding, dilation);
  if (grad_bias.has_value()) {
    check_like(*grad_bias, x, op, "grad_bias", "x");
    LABOPS_CHECK(grad_bias->dim() == 1 && grad_bias->sym_size(0) == grad_weight.sym_size(0), "labops.", op,
                 ": grad_bias must have shape (", grad_weight.sym_size(0), ",) (grad_weight.size(0)), got ",
                 grad_bias->sym_sizes());
  }
}

// Whether t is stored channels_last and not also NCHW-contiguous (a tensor with
// C == 1 or H*W == 1 is both, and stays NCHW). See Note [channels_last].
inline bool is_channels_last(const at::Tensor& t) {
  return t.dim() == 4 && !t.is_contiguous() && t.is_contiguous(at::MemoryFormat::ChannelsLast);
}

inline at::MemoryFormat memory_format(bool channels_last) {
  return channels_last ? at::MemoryFormat::ChannelsLast : at::MemoryFormat::Contiguous;
}

// ---- the Meta kernels: the rules, and an output of the eager op's shape, dtype and memory format ----
struct Meta {
  static at::Tensor forward(const at::Tensor& x, const at::Tensor& weight, const std::optional<at::Tensor>& bias,
                            at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
    const std::array<c10::SymInt, 4> out_size =
        depthwise_conv2d_output_size(x, weight, bias, stride, padding, dilation);
    return at::empty_symint(out_size, x.options().memory_format(memory_format(is_channels_last(x))));
  }

  static at::Tensor backward_input(const at::Tensor& grad_output, const at::Tensor& weight,
                                   c10::SymIntArrayRef input_size, at::IntArrayRef stride,
                                   at::IntArrayRef padding, at::IntArrayRef dilation) {
    check_depthwise_conv2d_backward_input(grad_output, weight, input_size, stride, padding, dilation);
    return at::empty_symint(input_size,
                            grad_output.options().memory_format(memory_format(is_channels_last(grad_output))));
  }

  static at::Tensor backward_weight(const at::Tensor& grad_output, const at::Tensor& x,
                                    c10::SymIntArrayRef weight_size, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef dilation) {
    check_weight_gradient("depthwise_conv2d_backward_weight", grad_output, x, weight_size, stride, padding, dilation);
    return at::empty_symint(weight_size, grad_output.options());
  }

  static at::Tensor backward_bias(const at::Tensor& grad_output) {
    return at::empty_symint(c10::SymIntArrayRef(depthwise_conv2d_backward_bias_size(grad_output)),
                            grad_output.options());
  }

  static void acc_grad_parameters(const at::Tensor& grad_output, const at::Tensor& x,
                                  const at::Tensor& grad_weight,
                                  const std::optional<at::Tensor>& grad_bias,
                                  at::IntArrayRef stride, at::IntArrayRef padding,
                                  at::IntArrayRef dilation, double /*scale*/) {
    check_depthwise_conv2d_acc_grad_parameters(grad_output, x, grad_weight, grad_bias, stride, padding, dilation);
  }
};

// ---- the geometry the eager kernels run, from the checked, concrete sizes ----
// x_size is (N, C_in, H, W), w_size is (C_out, 1, kH, kW), both already through check_geometry.
inline Geometry make_geometry(at::IntArrayRef x_size, at::IntArrayRef w_size, at::IntArrayRef stride,
                              at::IntArrayRef padding, at::IntArrayRef dilation) {
  Geometry g;
  g.batch = x_size[0];
  g.in_channels = x_size[1];
  g.out_channels = w_size[0];
  g.multiplier = g.out_channels / g.in_channels;
  g.in_h = x_size[2];
  g.in_w = x_size[3];
  g.k_h = w_size[2];
  g.k_w = w_size[3];
  g.stride_h = stride[0];
  g.stride_w = stride[1];
  g.pad_h = padding[0];
  g.pad_w = padding[1];
  g.dil_h = dilation[0];
  g.dil_w = dilation[1];
  g.out_h = conv::output_size(g.in_h, g.k_h, g.stride_h, g.pad_h, g.dil_h);
  g.out_w = conv::output_size(g.in_w, g.k_w, g.stride_w, g.pad_w, g.dil_w);
  return g;
}

#define LABOPS_DEPTHWISE_DISPATCH(TYPE, ...) \
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, TYPE, "labops_depthwise", __VA_ARGS__)

template <typename Launcher>
struct Entry {
  // The activations `ts` in the layout the launcher reads (Note [channels_last]):
  // channels_last, with g.channels_last set, when the caller's tensors are
  // (`keep_cl`) and the launcher has NHWC kernels for g and these tensors;
  // otherwise NCHW-contiguous. Each tensor is copied at most once.
  // `nhwc_kernels(g, ts)`: whether the kernel to run has NHWC kernels for g and ts.
  template <size_t K, typename HasNhwc>
  static std::array<at::Tensor, K> in_launcher_layout(Geometry& g, bool keep_cl, std::array<at::Tensor, K> ts,
                                                      HasNhwc&& nhwc_kernels) {
    g.channels_last = keep_cl && nhwc_kernels(g, ts);
    for (auto& t : ts) t = t.contiguous(memory_format(g.channels_last));
    return ts;
  }
  template <size_t K>
  static std::array<at::Tensor, K> in_launcher_layout(Geometry& g, bool keep_cl, std::array<at::Tensor, K> ts) {
    return in_launcher_layout<K>(g, keep_cl, ts, [](const Geometry& lg, at::ArrayRef<at::Tensor> data) {
      return Launcher::has_nhwc_kernels(lg, data);
    });
  }

  // A result in the caller's layout: channels_last when keep_cl (a no-op when
  // the launcher wrote it so).
  static at::Tensor in_caller_layout(const at::Tensor& result, bool keep_cl) {
    return keep_cl ? result.contiguous(at::MemoryFormat::ChannelsLast) : result;
  }

  static at::Tensor forward(const at::Tensor& x, const at::Tensor& weight,
                            const std::optional<at::Tensor>& bias, at::IntArrayRef stride,
                            at::IntArrayRef padding, at::IntArrayRef dilation) {
    depthwise_conv2d_output_size(x, weight, bias, stride, padding, dilation);
    const Geometry g = make_geometry(x.sizes(), weight.sizes(), stride, padding, dilation);
    const bool has_bias = bias.has_value() && bias->defined();
    c10::OptionalDeviceGuard guard(x.device());
    const bool keep_cl = is_channels_last(x);
    const std::array<int64_t, 4> out_size{g.batch, g.out_channels, g.out_h, g.out_w};
    if (g.batch * g.out_channels * g.out_h * g.out_w == 0) {
      return labops::empty(out_size, x.options().memory_format(memory_format(keep_cl)));
    }
    Geometry lg = g;
    const int forced = forward_ladder().forced();  // read once: the layout and the kernel agree
    const auto forward_nhwc = [&](const Geometry& geometry, at::ArrayRef<at::Tensor> data) {
      return Launcher::forward_has_nhwc_kernels(geometry, data, forced);
    };
    const at::Tensor xc = in_launcher_layout<1>(lg, keep_cl, {x}, forward_nhwc)[0];
    at::Tensor out = labops::empty(out_size, x.options().memory_format(memory_format(lg.channels_last)));
    const at::Tensor wc = weight.contiguous();
    const at::Tensor bc = has_bias ? bias->contiguous() : at::Tensor();
    LABOPS_DEPTHWISE_DISPATCH(x.scalar_type(), [&] {
      Launcher::template forward<scalar_t>(
          xc.const_data_ptr<scalar_t>(), wc.const_data_ptr<scalar_t>(),
          has_bias ? bc.const_data_ptr<scalar_t>() : nullptr, out.mutable_data_ptr<scalar_t>(), lg, forced);
    });
    return in_caller_layout(out, keep_cl);
  }

  static at::Tensor backward_input(const at::Tensor& grad_output, const at::Tensor& weight,
                                   at::IntArrayRef input_size, at::IntArrayRef stride,
                                   at::IntArrayRef padding, at::IntArrayRef dilation) {
    check_depthwise_conv2d_backward_input(grad_output, weight, as_sym_sizes(input_size), stride, padding, dilation);
    const Geometry g = make_geometry(input_size, weight.sizes(), stride, padding, dilation);
    c10::OptionalDeviceGuard guard(grad_output.device());
    const bool keep_cl = is_channels_last(grad_output);
    if (g.batch * g.in_channels * g.in_h * g.in_w == 0) {
      return labops::empty(input_size, grad_output.options().memory_format(memory_format(keep_cl)));
    }
    Geometry lg = g;
    const at::Tensor gc = in_launcher_layout<1>(lg, keep_cl, {grad_output})[0];
    at::Tensor grad_input =
        labops::empty(input_size, grad_output.options().memory_format(memory_format(lg.channels_last)));
    const at::Tensor wc = weight.contiguous();
    LABOPS_DEPTHWISE_DISPATCH(grad_output.scalar_type(), [&] {
      Launcher::template backward_input<scalar_t>(gc.const_data_ptr<scalar_t>(),
                                                  wc.const_data_ptr<scalar_t>(),
                                                  grad_input.mutable_data_ptr<scalar_t>(), lg);
    });
    return in_caller_layout(grad_input, keep_cl);
  }

  static at::Tensor backward_weight(const at::Tensor& grad_output, const at::Tensor& x,
                                    at::IntArrayRef weight_size, at::IntArrayRef stride,
                                    at::IntArrayRef padding, at::IntArrayRef dilation) {
    check_weight_gradient("depthwise_conv2d_backward_weight", grad_output, x, as_sym_sizes(weight_size), stride,
                          padding, dilation);
    return weight_gradient(grad_output, x, weight_size, stride, padding, dilation);
  }

  static at::Tensor backward_bias(const at::Tensor& grad_output) {
    depthwise_conv2d_backward_bias_size(grad_output);
    return bias_gradient(grad_output);
  }

  // ---- accGradParameters: grad_weight += scale * dE/dW, grad_bias += scale * dE/db, in place ----
  // What a Torch7 module calls (labops/torch7.py); autograd calls the two ops above, which are this at
  // scale 1 into new tensors.
  static void acc_grad_parameters(const at::Tensor& grad_output, const at::Tensor& x, const at::Tensor& grad_weight,
                                  const std::optional<at::Tensor>& grad_bias, at::IntArrayRef stride,
                                  at::IntArrayRef padding, at::IntArrayRef dilation, double scale) {
    check_depthwise_conv2d_acc_grad_parameters(grad_output, x, grad_weight, grad_bias, stride, padding, dilation);
    const at::Tensor dw = weight_gradient(grad_output, x, grad_weight.sizes(), stride, padding, dilation);
    if (grad_bias.has_value()) grad_bias->add_(bias_gradient(grad_output), scale);
    grad_weight.add_(dw, scale);
  }

 private:
  // The two gradients of the parameters, from arguments already through the rules above.
  static at::Tensor weight_gradient(const at::Tensor& grad_output, const at::Tensor& x, at::IntArrayRef weight_size,
                                    at::IntArrayRef stride, at::IntArrayRef padding, at::IntArrayRef dilation) {
    const Geometry g = make_geometry(x.sizes(), weight_size, stride, padding, dilation);
    c10::OptionalDeviceGuard guard(grad_output.device());
    at::Tensor grad_weight = labops::empty(weight_size, grad_output.options());
    if (g.batch == 0) return grad_weight.zero_();  // a sum over nothing
    Geometry lg = g;  // read in x's layout (grad_output follows it)
    const std::array<at::Tensor, 2> gx = in_launcher_layout<2>(lg, is_channels_last(x), {grad_output, x});
    const at::Tensor &gc = gx[0], &xc = gx[1];
    LABOPS_DEPTHWISE_DISPATCH(grad_output.scalar_type(), [&] {
      Launcher::template backward_weight<scalar_t>(gc.const_data_ptr<scalar_t>(),
                                                   xc.const_data_ptr<scalar_t>(),
                                                   grad_weight.mutable_data_ptr<scalar_t>(), lg);
    });
    return grad_weight;
  }

  static at::Tensor bias_gradient(const at::Tensor& grad_output) {
    c10::OptionalDeviceGuard guard(grad_output.device());
    const int64_t batch = grad_output.size(0), channels = grad_output.size(1);
    const int64_t plane = grad_output.size(2) * grad_output.size(3);
    at::Tensor grad_bias = labops::empty({channels}, grad_output.options());
    if (channels == 0) return grad_bias;
    if (batch * plane == 0) return grad_bias.zero_();
    // channels_last memory is an (N*H*W, C) matrix: its column sums are the
    // NCHW bias gradient of an (N*H*W, C, 1) tensor (Note [channels_last]).
    const bool cl = is_channels_last(grad_output);
    const at::Tensor gc = grad_output.contiguous(memory_format(cl));
    LABOPS_DEPTHWISE_DISPATCH(grad_output.scalar_type(), [&] {
      Launcher::template backward_bias<scalar_t>(gc.const_data_ptr<scalar_t>(),
                                                 grad_bias.mutable_data_ptr<scalar_t>(),
                                                 cl ? batch * plane : batch, channels, cl ? 1 : plane);
    });
    return grad_bias;
  }
};

// Every op of the layer with its kernel in `Kernels`: Entry<Launcher> on a device (cpu.cpp, cuda.cu),
// Meta for fake tensors (register.cpp). One list, so no op lacks a kernel on one dispatch key.
template <typename Kernels, typename Module>
void register_kernels(Module& m) {
  m.impl("depthwise_conv2d", &Kernels::forward);
  m.impl("depthwise_conv2d_backward_input", &Kernels::backward_input);
  m.impl("depthwise_conv2d_backward_weight", &Kernels::backward_weight);
  m.impl("depthwise_conv2d_backward_bias", &Kernels::backward_bias);
  m.impl("depthwise_conv2d_acc_grad_parameters", &Kernels::acc_grad_parameters);
}

#undef LABOPS_DEPTHWISE_DISPATCH

}  // namespace labops::depthwise
