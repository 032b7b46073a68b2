// What every fused kernel's entry point shares: whether the CUDA kernels were built, and which implementation to run.
#pragma once

namespace ampcheck::kernels {

// Whether this build carries the CUDA kernels (CMake AMPCHECK_CUDA_KERNELS, on where LibTorch has CUDA and nvcc is
// found).
bool cuda_kernels_built();

enum class Impl { Auto, Reference };  // Auto: the CUDA kernel for CUDA tensors where built, else the reference

}  // namespace ampcheck::kernels
