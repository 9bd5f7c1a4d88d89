// The activations of kernels/cpu/elementwise.h written straight from their definitions, in
// double: the reference the CPU kernel tests compare each Linear's epilogue against.
#ifndef LINSERVE_TESTS_TESTING_ACTIVATION_REFERENCE_H_
#define LINSERVE_TESTS_TESTING_ACTIVATION_REFERENCE_H_

#include <cmath>

#include "kernels/cpu/elementwise.h"

namespace linserve {

inline double ActivationRef(cpu::Activation act, double x) {
  switch (act) {
    case cpu::Activation::kNone:
      return x;
    case cpu::Activation::kGelu:
      return 0.5 * x * (1.0 + std::erf(x / std::sqrt(2.0)));
    case cpu::Activation::kGeluTanh:
      return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x)));
    case cpu::Activation::kRelu:
      return x > 0 ? x : 0.0;
    case cpu::Activation::kSilu:
      return x / (1.0 + std::exp(-x));
    case cpu::Activation::kSigmoid:
      return 1.0 / (1.0 + std::exp(-x));
  }
  return x;
}

}  // namespace linserve

#endif  // LINSERVE_TESTS_TESTING_ACTIVATION_REFERENCE_H_
