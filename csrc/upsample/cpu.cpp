// CPU kernels for bilinear upsampling: the bodies of upsample/upsample.h looped
// with at::parallel_for.
//
//  * forward, two rungs (forward_ladder in entry.h):
//      1 textbook: forward_at for every output element, each computing its
//        row's and its column's taps;
//      2 row_taps: one task per output row; the column taps are the same for
//        every row, so they are computed once per call; the default.
//  * gather backward (deterministic): one task per input row h. First
//    contract the output rows that read h into one row t = sum_y A_h[y,h] G[y,:]
//    (a vectorizable axpy), then gather each input column from t.
//  * scatter backward: one task per (n, c) plane, so the += never race.
#include <string>
#include <vector>

#include <ATen/Parallel.h>
#include <torch/library.h>

#include "entry.h"
#include "../common/cpu/parallel.h"

namespace labops::upsample {
using namespace labops::cpu;  // the shared CPU helpers: parallel.h, elementwise.h

struct UpsampleLauncher {
  template <typename scalar_t, typename T>
  static void forward(const scalar_t* x, scalar_t* y, int64_t planes, const Axis<T>& ah, const Axis<T>& aw,
                      int forced) {
    const int rung = forward_ladder().run(c10::DeviceType::CPU, forced, 2, [](int) { return std::string(); });
    if (rung == 1) {  // the textbook: upsample.h's forward_at, element by element
      at::parallel_for(0, planes * ah.out * aw.out, kGrainElements, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) y[i] = static_cast<scalar_t>(upsample::forward_at(i, x, ah, aw));
      });
      return;
    }
    std::vector<Taps<T>> cols(aw.out);
    for (int64_t ox = 0; ox < aw.out; ++ox) cols[ox] = upsample::source_taps(ox, aw);
    at::parallel_for(0, planes * ah.out, grain_for(aw.out), [&](int64_t begin, int64_t end) {
      for (int64_t row = begin; row < end; ++row) {
        const scalar_t* plane = x + (row / ah.out) * ah.in * aw.in;
        Taps<T> th = upsample::source_taps(row % ah.out, ah);
        scalar_t* out = y + row * aw.out;
        for (int64_t ox = 0; ox < aw.out; ++ox) {
          out[ox] = static_cast<scalar_t>(upsample::bilinear_at(plane, aw.in, th, cols[ox]));
        }
      }
    });
  }

  template <typename scalar_t, typename T>
  static void backward_gather(const scalar_t* g, scalar_t* grad_in, int64_t planes, const Axis<T>& ah,
                              const Axis<T>& aw) {
    std::vector<Range> row_ranges(ah.in);
    for (int64_t h = 0; h < ah.in; ++h) row_ranges[h] = upsample::outputs_reading(h, ah);
    at::parallel_for(0, planes * ah.in, grain_for(2 * aw.out), [&](int64_t begin, int64_t end) {
      std::vector<T> t(aw.out);  // A_h[:, h]^T G for the current input row
      for (int64_t row = begin; row < end; ++row) {
        const int64_t h = row % ah.in;
        const scalar_t* gp = g + (row / ah.in) * ah.out * aw.out;
        std::fill(t.begin(), t.end(), T(0));
        for (int64_t oy = row_ranges[h].begin; oy < row_ranges[h].end; ++oy) {
          const T wy = upsample::tap_weight(upsample::source_taps(oy, ah), h);
          if (wy == T(0)) continue;
          const scalar_t* grow = gp + oy * aw.out;
          T* tp = t.data();
          for (int64_t ox = 0; ox < aw.out; ++ox) tp[ox] += wy * static_cast<T>(grow[ox]);
        }
        scalar_t* out = grad_in + row * aw.in;
        for (int64_t w = 0; w < aw.in; ++w) out[w] = static_cast<scalar_t>(upsample::column_gather(w, t.data(), aw));
      }
    });
  }

  template <typename scalar_t, typename T>
  static void backward_scatter(const scalar_t* g, T* acc, int64_t planes, const Axis<T>& ah, const Axis<T>& aw) {
    std::vector<Taps<T>> cols(aw.out);
    for (int64_t ox = 0; ox < aw.out; ++ox) cols[ox] = upsample::source_taps(ox, aw);
    const int64_t plane_in = ah.in * aw.in;
    at::parallel_for(0, planes, grain_for(ah.out * aw.out), [&](int64_t begin, int64_t end) {
      auto add = [acc](int64_t offset, T value) { acc[offset] += value; };
      for (int64_t p = begin; p < end; ++p) {
        for (int64_t oy = 0; oy < ah.out; ++oy) {
          const Taps<T> th = upsample::source_taps(oy, ah);
          const scalar_t* grow = g + (p * ah.out + oy) * aw.out;
          for (int64_t ox = 0; ox < aw.out; ++ox) {
            upsample::scatter_to_taps(static_cast<T>(grow[ox]), th, cols[ox], p * plane_in, aw.in, add);
          }
        }
      }
    });
  }
};

}  // namespace labops::upsample

TORCH_LIBRARY_IMPL(labops, CPU, m) {
  labops::upsample::register_kernels<labops::upsample::Entry<labops::upsample::UpsampleLauncher>>(m);
}
