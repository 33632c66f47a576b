// Reorg (YOLOv2's passthrough layer), three orders: the index math, shared
// by reorg/cpu.cpp and reorg/cuda.cu. The tensor-level entry points are in
// reorg_ops.h. See Note [reorg orders] and Note [reorg tasks].
#pragma once

#include <cstdint>

#include "../common/fast_divider.h"
#include "../common/loop.h"

namespace labops::reorg {

enum class ReorgOrder { Darknet, DCR, CRD };

// ---- the geometry and the index maps ----

// Note [reorg orders]
// With stride s, Ho = H/s, Wo = W/s, view the NCHW input as 6-D
//     x[n, c, h, dy, w, dx]            sizes (N, C, Ho, s, Wo, s)
// (input row h*s + dy, column w*s + dx). The output (N, C*s*s, Ho, Wo) is
//     crd:  y[n, c, dy, dx, h, w]      channel c*s*s + dy*s + dx   (F.pixel_unshuffle)
//     dcr:  y[n, dy, dx, c, h, w]      channel (dy*s + dx)*C + c   (tf.nn.space_to_depth)
//     darknet: dcr applied to x's memory viewed as (N, C/s^2, H*s, W*s), its
//           (N, C, H, W) result's memory viewed as (N, C*s^2, H/s, W/s).
//           This is what darknet's reorg_cpu(x, W, H, C, N, s, forward=0)
//           computes; see labops/reference/reorg.py for the loop itself.
// So every order is one of two 6-D permutations of a "canonical" geometry
// (C, s, Ho, Wo): crd or dcr (darknet = dcr with C/s^2, H, W).

// The canonical sizes every order reduces to; see Note [reorg orders].
struct ReorgShape {
  int64_t C, s, Ho, Wo;
  bool crd;  // false: the dcr permutation (dcr and darknet)
};

inline ReorgShape reorg_shape(ReorgOrder order, int64_t C, int64_t H, int64_t W, int64_t s) {
  if (order == ReorgOrder::Darknet) return {C / (s * s), s, H, W, false};
  return {C, s, H / s, W / s, order == ReorgOrder::CRD};
}

template <typename Div>
struct ReorgGeometry {
  using index_t = typename Div::index_t;
  index_t C, s, Ho, Wo, HW, y_dx_stride;
  bool crd;
  Div by_s, by_c, by_ho, by_wo, by_hw;

  ReorgGeometry() = default;
  explicit ReorgGeometry(const ReorgShape& r)
      : C(r.C), s(r.s), Ho(r.Ho), Wo(r.Wo), HW(r.Ho * r.Wo),
        y_dx_stride(r.crd ? r.Ho * r.Wo : r.C * r.Ho * r.Wo), crd(r.crd),
        by_s(r.s), by_c(r.C), by_ho(r.Ho), by_wo(r.Wo), by_hw(r.Ho * r.Wo) {}
};

// Note [reorg tasks]
// A *task* is what one CUDA thread or one CPU loop step moves: the s input
// elements x[n, c, h, dy, w, 0..s-1] (contiguous in memory) and the s output
// elements they feed, y[..., dx, ..., h, w] for dx = 0..s-1 (one per output
// plane, each at the same (h, w)). Tasks are numbered in the output's order
// with dx left out, t = (((n, A), B), h, w) with (A, B) = (c, dy) for crd
// and (dy, c) for dcr, so consecutive tasks write consecutive outputs.
//   reorg_task(g, t)           -> index of x[.., dx=0] and of y[.., dx=0]
//   element dx of a task:         x index + dx,   y index + dx * y_dx_stride
// Forward gathers y from x through this map; backward gathers grad_x from
// grad_y through the same map read the other way (each thread owns the
// grad_x elements it writes: no scatter, no atomics). For one element at a
// time, reorg_input_index (output -> input) and reorg_output_index (input ->
// output) are the per-index forms of the same map.
template <typename index_t>
struct ReorgTask {
  index_t x;  // input index of dx = 0; dx adds dx
  index_t y;  // output index of dx = 0; dx adds dx * y_dx_stride
};

// Input index of x[n, c, h, dy, w, 0], with nc = n*C + c.
template <typename index_t>
LABOPS_HOST_DEVICE index_t reorg_x_index(index_t nc, index_t h, index_t dy, index_t w, index_t s, index_t Ho,
                                         index_t Wo) {
  return ((nc * Ho + h) * s + dy) * (Wo * s) + w * s;
}

// Task t (numbered in the output's order, dx left out) -> where it reads and writes.
template <typename Div>
LABOPS_HOST_DEVICE ReorgTask<typename Div::index_t> reorg_task(const ReorgGeometry<Div>& g,
                                                             typename Div::index_t t) {
  using index_t = typename Div::index_t;
  const index_t q = g.by_hw.div(t);  // crd: (n*C + c)*s + dy;  dcr: (n*s + dy)*C + c
  const index_t r = t - q * g.HW;    // h*Wo + w
  const index_t h = g.by_wo.div(r), w = r - h * g.Wo;
  index_t nc, dy, y;
  if (g.crd) {
    nc = g.by_s.div(q);
    dy = q - nc * g.s;
    y = q * g.s * g.HW + r;  // y[n, c, dy, 0, h, w]
  } else {
    const index_t ndy = g.by_c.div(q), c = q - ndy * g.C;
    const index_t n = g.by_s.div(ndy);
    dy = ndy - n * g.s;
    nc = n * g.C + c;
    y = (ndy * g.s * g.C + c) * g.HW + r;  // y[n, dy, 0, c, h, w]
  }
  return {reorg_x_index(nc, h, dy, w, g.s, g.Ho, g.Wo), y};
}

// Element (v, dx) of the run of tasks starting at `task` (v counts
// consecutive w in one row): where it sits in x and in y.
template <typename Div>
LABOPS_HOST_DEVICE typename Div::index_t reorg_x_element(const ReorgGeometry<Div>& g,
                                                         ReorgTask<typename Div::index_t> task,
                                                         typename Div::index_t v, typename Div::index_t dx) {
  return task.x + v * g.s + dx;
}
template <typename Div>
LABOPS_HOST_DEVICE typename Div::index_t reorg_y_element(const ReorgGeometry<Div>& g,
                                                         ReorgTask<typename Div::index_t> task,
                                                         typename Div::index_t v, typename Div::index_t dx) {
  return task.y + dx * g.y_dx_stride + v;
}

// Output index -> the input index it copies (the forward's gather, one element).
template <typename Div>
LABOPS_HOST_DEVICE typename Div::index_t reorg_input_index(const ReorgGeometry<Div>& g,
                                                           typename Div::index_t out) {
  using index_t = typename Div::index_t;
  const index_t q = g.by_hw.div(out), r = out - q * g.HW;
  index_t t, dx;
  if (g.crd) {  // q = ((n*C + c)*s + dy)*s + dx
    const index_t q2 = g.by_s.div(q);
    dx = q - q2 * g.s;
    t = q2 * g.HW + r;
  } else {  // q = ((n*s + dy)*s + dx)*C + c
    const index_t q2 = g.by_c.div(q), c = q - q2 * g.C;
    const index_t ndy = g.by_s.div(q2);
    dx = q2 - ndy * g.s;
    t = (ndy * g.C + c) * g.HW + r;
  }
  return reorg_task(g, t).x + dx;
}

// Input index -> the output index that holds it (the backward's gather).
template <typename Div>
LABOPS_HOST_DEVICE typename Div::index_t reorg_output_index(const ReorgGeometry<Div>& g,
                                                            typename Div::index_t in) {
  using index_t = typename Div::index_t;
  const index_t i1 = g.by_s.div(in), dx = in - i1 * g.s;     // i1 = ((nc*Ho + h)*s + dy)*Wo + w
  const index_t i2 = g.by_wo.div(i1), w = i1 - i2 * g.Wo;    // i2 = (nc*Ho + h)*s + dy
  const index_t i3 = g.by_s.div(i2), dy = i2 - i3 * g.s;     // i3 = nc*Ho + h
  const index_t nc = g.by_ho.div(i3), h = i3 - nc * g.Ho;
  index_t plane;
  if (g.crd) {
    plane = (nc * g.s + dy) * g.s + dx;
  } else {
    const index_t n = g.by_c.div(nc), c = nc - n * g.C;
    plane = ((n * g.s + dy) * g.s + dx) * g.C + c;
  }
  return plane * g.HW + h * g.Wo + w;
}

}  // namespace labops::reorg
