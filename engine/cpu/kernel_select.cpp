// Picks the kernel table from what cpuid reports, once.
#include <cpuid.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels.h"

#include <cerrno>
#include <cstring>
#include <string>

#include "../core/error.h"

namespace ftllm::cpu {

const Kernels& avx2_kernel_table();        // avx2_kernels.cpp, built with -mavx2 -mfma -mf16c
const Kernels& avx512vnni_kernel_table();  // the same, with the integer dots built for AVX-512 VNNI
const Kernels& avx512amx_kernel_table();   // avx512_amx_gemm.cpp: the VNNI table with its block-type GEMM on AMX tiles
const Kernels& avx512amx_emulated_kernel_table();

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

// cpuid's AMX-TILE and AMX-INT8 (leaf 7, edx bits 24 and 25).
bool cpu_has_amx_int8() {
  unsigned a, b, c, d;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  return (d & (1u << 24)) && (d & (1u << 25));
}

// Why the AMX table is not in use on this machine, or "" when it is. Asked once: Linux hands a process the
// 8 KB tile state only on request (arch_prctl ARCH_REQ_XCOMP_PERM; without it the first tile instruction
// is a SIGILL), and the grant covers every thread of the process.
const std::string& amx_refusal() {
  static const std::string why = []() -> std::string {
    if (!cpu_has_amx_int8()) return "this CPU has no AMX-INT8";
    if (!cpu_has_avx512_vnni()) return "AVX-512 VNNI (its scaling steps) is missing or not enabled";
    unsigned xcr0_lo, xcr0_hi;
    __asm__("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
    if ((xcr0_lo & 0x60000u) != 0x60000u) return "the operating system does not enable the tile state (XCR0 bits 17-18)";
    constexpr long kReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
    if (syscall(SYS_arch_prctl, kReqXcompPerm, kXfeatureXtiledata) != 0)
      return std::string("the kernel refused the tile state (arch_prctl ARCH_REQ_XCOMP_PERM: ") + std::strerror(errno) + ")";
    if (!avx512amx_matches_vnni(avx512amx_kernel_table())) return "its self-check did not match the AVX-512 VNNI kernels bit for bit";
    return "";
  }();
  return why;
}

}  // namespace

const Kernels* avx512amx_kernels() { return amx_refusal().empty() ? &avx512amx_kernel_table() : nullptr; }

const Kernels* avx512amx_emulated_kernels() { return avx512vnni_kernels() ? &avx512amx_emulated_kernel_table() : nullptr; }

std::string kernels_description(const Kernels& k) {
  std::string out = k.name;
  if (cpu_has_amx_int8() && &k != avx512amx_kernels())
    out += amx_refusal().empty() ? " (AMX available, not chosen)" : " (AMX unused: " + amx_refusal() + ")";
  return out;
}

const Kernels* avx512vnni_kernels() {
  static const bool ok = cpu_has_avx512_vnni();
  return ok ? &avx512vnni_kernel_table() : nullptr;
}

const Kernels* avx2_kernels() {
  static const bool ok = cpu_has_avx2_fma_f16c();
  return ok ? &avx2_kernel_table() : nullptr;
}

const Kernels& best_kernels() {
  static const Kernels& k = avx512amx_kernels()    ? *avx512amx_kernels()
                            : avx512vnni_kernels() ? *avx512vnni_kernels()
                            : avx2_kernels()       ? *avx2_kernels()
                                                   : scalar_kernels();
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
  if (name == "avx512amx") {
    if (!avx512amx_kernels()) throw EngineError("kernels avx512amx are unavailable: " + amx_refusal() + "; use auto, avx512vnni, avx2 or scalar");
    return *avx512amx_kernels();
  }
  throw EngineError("unknown kernels \"" + std::string(name) + "\": use auto, scalar, avx2, avx512vnni or avx512amx");
}

}  // namespace ftllm::cpu
