// Picks the kernel table from what cpuid reports, once.
#include <cpuid.h>

#include "kernels.h"

#include <string>

#include "../core/error.h"

namespace ftllm::cpu {

const Kernels& avx2_kernel_table();        // avx2_kernels.cpp, built with -mavx2 -mfma -mf16c
const Kernels& avx512vnni_kernel_table();  // the same, with the integer dots built for AVX-512 VNNI

namespace {

bool cpu_has_avx2_fma_f16c() {
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return false;
  bool fma = c & (1u << 12), osxsave = c & (1u << 27), avx = c & (1u << 28), f16c = c & (1u << 29);
  if (!(fma && osxsave && avx && f16c)) return false;
  // The OS must save the YMM registers on context switches (XCR0 bits 1 and 2).
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  if ((xcr0_lo & 6u) != 6u) return false;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return b & (1u << 5);  // AVX2
}

// AVX-512 F, BW, VL and VNNI, with the OS saving the opmask and ZMM state (XCR0 bits 5-7).
bool cpu_has_avx512_vnni() {
  if (!cpu_has_avx2_fma_f16c()) return false;
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool f = b & (1u << 16), bw = b & (1u << 30), vl = b & (1u << 31), vnni = c & (1u << 11);
  if (!(f && bw && vl && vnni)) return false;
  unsigned xcr0_lo, xcr0_hi;
  __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  return (xcr0_lo & 0xe6u) == 0xe6u;
}

}  // namespace

const Kernels* avx512vnni_kernels() {
  static const bool ok = cpu_has_avx512_vnni();
  return ok ? &avx512vnni_kernel_table() : nullptr;
}

const Kernels* avx2_kernels() {
  static const bool ok = cpu_has_avx2_fma_f16c();
  return ok ? &avx2_kernel_table() : nullptr;
}

const Kernels& best_kernels() {
  static const Kernels& k = avx512vnni_kernels() ? *avx512vnni_kernels() : avx2_kernels() ? *avx2_kernels() : scalar_kernels();
  return k;
}

const Kernels& kernels_named(std::string_view name) {
  if (name.empty() || name == "auto") return best_kernels();
  if (name == "scalar") return scalar_kernels();
  if (name == "avx2") {
    if (!avx2_kernels()) throw EngineError("kernels avx2 need AVX2, FMA and F16C, which this CPU lacks; use auto or scalar");
    return *avx2_kernels();
  }
  if (name == "avx512vnni") {
    if (!avx512vnni_kernels()) throw EngineError("kernels avx512vnni need AVX-512 F/BW/VL and VNNI, which this CPU lacks; use auto, avx2 or scalar");
    return *avx512vnni_kernels();
  }
  throw EngineError("unknown kernels \"" + std::string(name) + "\": use auto, scalar, avx2 or avx512vnni");
}

}  // namespace ftllm::cpu
