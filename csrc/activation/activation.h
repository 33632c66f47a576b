// Tanh and GELU: the math of both layers, in one place.
//
// Every function here is a template over the value type T, so the CPU
// launcher runs it on float/double and on SIMD vectors, and the CUDA launcher
// runs it on float/double inside the grid-stride loop. Half and bfloat16
// inputs are converted to float first (accumulate in float).
#pragma once

#include <string_view>

#include <c10/util/Exception.h>

#include "../common/check.h"
#include "../common/loop.h"
#include "../common/math.h"

namespace labops::activation {

// ---- Tanh (THNN's Tanh_updateOutput / Tanh_updateGradInput) ----
// The gradient is written with the *output* y = tanh(x): dy/dx = 1 - y^2.
// Saving y, not x, means backward never evaluates tanh again.
template <typename T>
LABOPS_HOST_DEVICE T tanh_forward(T x) {
  return math::tanh(x);
}

template <typename T>
LABOPS_HOST_DEVICE T tanh_backward(T grad_output, T output) {
  return grad_output * (T(1) - output * output);
}

// ---- GELU, three forms ----
enum class GeluApprox { None, Tanh, Sigmoid };

inline GeluApprox parse_gelu_approx(std::string_view name) {
  if (name == "none") return GeluApprox::None;
  if (name == "tanh") return GeluApprox::Tanh;
  if (name == "sigmoid") return GeluApprox::Sigmoid;
  LABOPS_CHECK(false, "labops.gelu: approximate must be 'none', 'tanh' or 'sigmoid', got '",
                    name, "'");
}

constexpr double kSqrtHalf = 0.70710678118654752440;         // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;       // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;      // sqrt(2 / pi)
constexpr double kTanhCubic = 0.044715;                      // the cubic term's weight
constexpr double kSigmoidSlope = 1.702;                      // x * sigmoid(1.702 x)

// none:    x * Phi(x),  Phi(x) = (1 + erf(x / sqrt 2)) / 2
// tanh:    x/2 * (1 + tanh(u)),  u = sqrt(2/pi) * (x + 0.044715 x^3)
// sigmoid: x * sigmoid(1.702 x)
template <GeluApprox A, typename T>
LABOPS_HOST_DEVICE T gelu_forward(T x) {
  if constexpr (A == GeluApprox::None) {
    return T(0.5) * x * (T(1) + math::erf(x * T(kSqrtHalf)));
  } else if constexpr (A == GeluApprox::Tanh) {
    T u = T(kSqrt2OverPi) * (x + T(kTanhCubic) * x * x * x);
    return T(0.5) * x * (T(1) + math::tanh(u));
  } else {
    return x / (T(1) + math::exp(T(-kSigmoidSlope) * x));
  }
}

// d/dx of each form, times the incoming gradient.
//   none:    Phi(x) + x * phi(x),  phi(x) = exp(-x^2/2) / sqrt(2 pi)
//   tanh:    (1 + t)/2 + x/2 * (1 - t^2) * sqrt(2/pi) * (1 + 3 * 0.044715 x^2),  t = tanh(u)
//   sigmoid: s + 1.702 x * s * (1 - s),  s = sigmoid(1.702 x)
template <GeluApprox A, typename T>
LABOPS_HOST_DEVICE T gelu_backward(T grad_output, T x) {
  if constexpr (A == GeluApprox::None) {
    T cdf = T(0.5) * (T(1) + math::erf(x * T(kSqrtHalf)));
    T pdf = T(kInvSqrt2Pi) * math::exp(T(-0.5) * x * x);
    return grad_output * (cdf + x * pdf);
  } else if constexpr (A == GeluApprox::Tanh) {
    T x2 = x * x;
    T t = math::tanh(T(kSqrt2OverPi) * (x + T(kTanhCubic) * x2 * x));
    T du_dx = T(kSqrt2OverPi) * (T(1) + T(3 * kTanhCubic) * x2);
    return grad_output * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du_dx);
  } else {
    T s = T(1) / (T(1) + math::exp(T(-kSigmoidSlope) * x));
    return grad_output * (s + T(kSigmoidSlope) * x * s * (T(1) - s));
  }
}

// Function objects wrapping the bodies above, so an elementwise launcher can
// take "the layer" as one template argument on either device.
struct TanhForward {
  static constexpr const char* kOp = "tanh";  // the op, for the ladder's messages
  template <typename T>
  LABOPS_HOST_DEVICE T operator()(T x) const { return tanh_forward(x); }
};
struct TanhBackward {
  template <typename T>
  LABOPS_HOST_DEVICE T operator()(T grad_output, T output) const {
    return tanh_backward(grad_output, output);
  }
};
template <GeluApprox A>
struct GeluForward {
  static constexpr const char* kOp = "gelu";
  template <typename T>
  LABOPS_HOST_DEVICE T operator()(T x) const { return gelu_forward<A>(x); }
};
template <GeluApprox A>
struct GeluBackward {
  template <typename T>
  LABOPS_HOST_DEVICE T operator()(T grad_output, T x) const { return gelu_backward<A>(grad_output, x); }
};

// Calls body.template operator()<A>() with A known at compile time, so each
// form gets its own specialised kernel instead of a branch per element.
template <typename F>
void dispatch_gelu_approx(GeluApprox approx, F&& body) {
  switch (approx) {
    case GeluApprox::None: return body(std::integral_constant<GeluApprox, GeluApprox::None>{});
    case GeluApprox::Tanh: return body(std::integral_constant<GeluApprox, GeluApprox::Tanh>{});
    case GeluApprox::Sigmoid: return body(std::integral_constant<GeluApprox, GeluApprox::Sigmoid>{});
  }
}

}  // namespace labops::activation
