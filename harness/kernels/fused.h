// Fused kernels: engine options that replace a sequence of stock ATen ops by one pass written in the project as
// CUDA C++ (harness/kernels/*.cu). Each has an ATen reference implementation with the same contract, used on the
// CPU, where the kernels were not built (no CUDA LibTorch or no nvcc), or when asked for (Impl::Reference), so tests
// and benchmarks compare the two. A fused kernel is a precision decision of its own: its contract says what it
// computes in which dtype.
// One header per op beside its kernel (contract, ATen reference and autograd in <op>.{h,cpp}, the CUDA C++ in the
// .cu files); this header includes them all.
#pragma once

#include "kernels/impl.h"

#include "kernels/adamw.h"
#include "kernels/bias_gelu.h"
#include "kernels/casts.h"
#include "kernels/head.h"
#include "kernels/layer_norm.h"
#include "kernels/square_sums.h"
