// Math functions overloaded for every "value type" a kernel body is
// instantiated with: float and double (CPU and CUDA), and on the CPU also
// ATen's SIMD vectors at::vec::Vectorized<T>, so the same templated body runs
// 8 or 16 lanes at a time there. Bodies call labops::math::exp(x) and so on.
#pragma once

#include <cmath>

#include "loop.h"

#if !defined(__CUDACC__) && !defined(__HIPCC__)
#include <ATen/cpu/vec/vec.h>
#endif

namespace labops::math {

LABOPS_HOST_DEVICE float exp(float x) { return ::expf(x); }
LABOPS_HOST_DEVICE double exp(double x) { return ::exp(x); }
LABOPS_HOST_DEVICE float tanh(float x) { return ::tanhf(x); }
LABOPS_HOST_DEVICE double tanh(double x) { return ::tanh(x); }
LABOPS_HOST_DEVICE float erf(float x) { return ::erff(x); }
LABOPS_HOST_DEVICE double erf(double x) { return ::erf(x); }

#if !defined(__CUDACC__) && !defined(__HIPCC__)
template <typename T>
inline at::vec::Vectorized<T> exp(const at::vec::Vectorized<T>& x) { return x.exp(); }
template <typename T>
inline at::vec::Vectorized<T> tanh(const at::vec::Vectorized<T>& x) { return x.tanh(); }
template <typename T>
inline at::vec::Vectorized<T> erf(const at::vec::Vectorized<T>& x) { return x.erf(); }
#endif

}  // namespace labops::math
