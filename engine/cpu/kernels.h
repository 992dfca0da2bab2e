// The CPU kernel table. Every entry has a scalar reference (the oracle) and, where the processor
// allows, a vectorised twin checked against it. Kernels are single-threaded; ops/ spreads them
// over the thread pool.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "../core/dtype.h"
#include "../kvcache/kv_format.h"

namespace ftllm::cpu {

// 32 activations as int8 for the integer dot products of quantized weights, made as llama.cpp's
// q8_1 is: d = max|x| / 127 rounded to float16, q = round(x * 127 / max|x|) (nearest even),
// s = d * sum(q) rounded to float16; sum is sum(q) exactly and ds = d * sum in float32 (kernels read
// ds, so no int-to-float conversion sits in their inner loops).
struct Q8Block {
  float d, s, ds;
  int32_t sum;
  int8_t q[32];
};

// One block of n cached head rows for attend_block: keys of d values and values of their first vd
// values, stored as `dtype` (kv_format.h). keys[0] is the block's first position; only the rows some
// query row sees are read. The call's query rows may belong to several key-value heads: `heads` of
// them in order, nq / heads rows each, head h's rows reading keys[j] + h * head_stride (the heads of
// one cache row side by side), so a block's rows are read once, whole and in order, for all of them.
struct AttendBlock {
  const uint8_t* const* keys;
  const uint8_t* const* values;  // multi-head latent attention: the key rows again
  kvcache::KvDtype dtype;
  int64_t n, d, vd;
  float scale;
  float softcap = 0;  // > 0: s_j = softcap * tanh(scale (q . k_j) / softcap) (Gemma 2)
  int64_t heads = 1, head_stride = 0;
  // The first `ahead` rows of the block the caller reads next (0: none), laid out as keys and values:
  // only asked for in advance (prefetched), never read, so a long context's cache streams from memory
  // without a wait at each block's first keys.
  const uint8_t* const* ahead_keys = nullptr;
  const uint8_t* const* ahead_values = nullptr;
  int64_t ahead = 0;
};
// nq query rows (d floats each) and their running state: row i sees keys lo[i] <= j < hi[i] of the
// block (none when hi[i] <= lo[i]: the row is left as it is); its max m[i], sum l[i] and unnormalised
// output acc + i * acc_stride (vd floats, then zeros up to a multiple of 8; acc_stride holds that) become
//   m' = max(m, max s_j),  l' = l e^(m - m') + sum e^(s_j - m'),  acc' = acc e^(m - m') + sum e^(s_j - m') v_j
// over the keys it sees, s_j = scale (q . k_j). Starting from m = -inf, l = 0, acc = 0 and meeting a
// sequence's blocks in order, acc / l is the row's attention. A row's bits depend only on its own
// query, state, range and the block: rows may be grouped into calls any way. Every key and value the
// rows see must be finite.
struct AttendRows {
  const float* const* q;
  int64_t nq;
  const int32_t* lo;
  const int32_t* hi;
  float* m;
  float* l;
  float* acc;
  int64_t acc_stride;
};

struct Kernels {
  const char* name;
  // y[m * ldy + n] = sum_k x[m * K + k] * w_n[k] for m in [0, M), n in [n0, n1): w is row-major
  // [N, K] in dtype wt (a Linear layer's weight as Hugging Face stores it), one row after another.
  // When uses_q8(wt), xq holds x quantized by quantize_q8 (M rows of K / 32 blocks) and the kernel
  // computes with it instead of x; otherwise xq is ignored.
  void (*matmul)(DType wt, const float* x, const Q8Block* xq, int64_t M, int64_t K, const void* w, int64_t n0,
                 int64_t n1, float* y, int64_t ldy);
  bool (*uses_q8)(DType wt);
  void (*quantize_q8)(const float* x, int64_t K, Q8Block* out);  // K a multiple of 32
  // Blocks sharing one float32 scale per 256 values (q8_per_256); K a multiple of 256.
  void (*quantize_q8_256)(const float* x, int64_t K, Q8Block* out);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float a, const float* x, float* y, int64_t n);  // y += a * x
  // out = x / sqrt(mean(x^2) + eps) * w
  void (*rmsnorm)(const float* x, const float* w, int64_t n, float eps, float* out);
  void (*silu_mul)(const float* gate, const float* up, float* out, int64_t n);  // silu(gate) * up
  void (*gelu_tanh_mul)(const float* gate, const float* up, float* out, int64_t n);  // gelu_tanh(gate) * up
  // One row of n values of any dtype (a whole row of a block type) to float32.
  void (*to_f32)(DType t, const void* src, float* dst, int64_t n);
  // Flash attention's step, an online softmax: query rows meet one block of cached keys and values.
  void (*attend_block)(const AttendBlock& block, const AttendRows& rows);
  // acc = fma(b, y, acc * x), each value rounded once (so the same bits on every table): the merge of
  // two online-softmax states, rescaled to their common maximum.
  void (*rescale_add)(float* acc, float x, const float* b, float y, int64_t n);
};

// The K-quants take their activations with one scale per 256 values (llama.cpp's q8_K): every block
// of a super-block then shares d, and the kernel sums the super-block's integer dots, times the weight's
// scales, before one float multiply.
constexpr bool q8_per_256(DType wt) {
  return wt == DType::Q2_K || wt == DType::Q3_K || wt == DType::Q4_K || wt == DType::Q5_K || wt == DType::Q6_K;
}

// The activation blocks kernel table k wants for weights of type wt (uses_q8(wt) must hold).
inline void quantize_activations(const Kernels& k, DType wt, const float* x, int64_t K, Q8Block* out) {
  (q8_per_256(wt) ? k.quantize_q8_256 : k.quantize_q8)(x, K, out);
}

const Kernels& scalar_kernels();
// nullptr when this processor lacks AVX2, FMA or F16C.
const Kernels* avx2_kernels();
// AVX2 with the integer dot products on AVX-512 VNNI; nullptr without AVX-512 F/BW/VL/VNNI.
const Kernels* avx512vnni_kernels();
// AVX-512 VNNI with the block types' GEMM (16 x 16 tiles and more) on AMX-INT8; nullptr unless the CPU has
// AMX, Linux grants the process its tile state and a self-check matches the VNNI table's bits.
const Kernels* avx512amx_kernels();
// That table with the tile instructions carried out in software: how tests check its tiling on machines
// without AMX (slow; never chosen to serve). nullptr where the VNNI table is.
const Kernels* avx512amx_emulated_kernels();
// The self-check the AMX table passes before it is used: amx (an AMX table) gives the VNNI table's bits
// on Q4_0, Q8_0, Q4_K and Q6_K tiles.
bool avx512amx_matches_vnni(const Kernels& amx);
// The fewest activation rows the AMX table takes to its tiles for weights of type wt (fewer go through
// the VNNI kernels).
int64_t amx_min_rows(DType wt);
// The fastest table this processor runs; chosen once from cpuid.
const Kernels& best_kernels();
// "auto" (best_kernels), "scalar", "avx2", "avx512vnni" or "avx512amx"; throws EngineError for a name this
// CPU cannot run, saying why.
const Kernels& kernels_named(std::string_view name);
// k's name, and on a CPU with AMX why k does not use it (refused by the kernel, not chosen): what status shows.
std::string kernels_description(const Kernels& k);

}  // namespace ftllm::cpu
