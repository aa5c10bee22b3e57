#include "codec/kernels.h"

namespace wccl::codec {

namespace scalar {
extern const Kernels kKernels;
}
namespace generic {
extern const Kernels kKernels;
}
#if WCCL_CODEC_X86
namespace avx2 {
extern const Kernels kKernels;
}
namespace avx512 {
extern const Kernels kKernels;
}
#endif

const Kernels *kernels_for(Tier t) {
  switch (t) {
    case Tier::kScalar:
      return &scalar::kKernels;
    case Tier::kGeneric:
      return &generic::kKernels;
#if WCCL_CODEC_X86
    // The flags lib/meson.build compiles each tier with, as CPU features (libgcc's check includes
    // the operating system's support for the wider registers).
    case Tier::kAvx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? &avx2::kKernels
                                                                             : nullptr;
    case Tier::kAvx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq")
                 ? &avx512::kKernels
                 : nullptr;
#else
    case Tier::kAvx2:
    case Tier::kAvx512:
      return nullptr;
#endif
  }
  return nullptr;
}

const Kernels &kernels() {
  static const Kernels *const best = [] {
    for (Tier t : {Tier::kAvx512, Tier::kAvx2}) {
      if (const Kernels *k = kernels_for(t)) return k;
    }
    return kernels_for(Tier::kGeneric);
  }();
  return *best;
}

}  // namespace wccl::codec
