// Whether this build carries the CUDA kernels (impl.h).
#include "kernels/impl.h"

namespace ampcheck::kernels {

bool cuda_kernels_built() {
#ifdef AMPCHECK_CUDA_KERNELS
  return true;
#else
  return false;
#endif
}

}  // namespace ampcheck::kernels
