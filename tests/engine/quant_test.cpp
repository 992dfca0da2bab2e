// Quantized types: ggml's dequantisation against gguf-py's golden values, our quantizers' round trip
// within their error bounds, float8 e4m3 against its definition, and every quantized matmul kernel
// against the reference: the scalar float path, and for int8 activations an exact double-precision
// sum over the same quantized activations.
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/error.h"
#include "cpu/avx2_quant.h"
#include "cpu/kernels.h"
#include "quant/block_decode.h"
#include "quant/ggml_blocks.h"
#include "quant/quant.h"
#include "../common/random_weights.h"

using namespace ftllm;
using test::random_floats;
using test::random_rows;
using test::kGgml;
using test::kOurs;
using test::GgmlLayout;

namespace {

// Every vectorised table this processor runs (AVX2, AVX-512 VNNI, AMX, and AMX emulated where AVX-512 is),
// each checked on its own.
std::vector<const cpu::Kernels*> fast_tables() {
  std::vector<const cpu::Kernels*> out;
  for (const cpu::Kernels* k : {cpu::avx2_kernels(), cpu::avx512vnni_kernels(), cpu::avx512amx_kernels(), cpu::avx512amx_emulated_kernels()})
    if (k) out.push_back(k);
  return out;
}

std::vector<uint8_t> from_hex(std::string_view hex) {
  std::vector<uint8_t> out(hex.size() / 2);
  for (size_t i = 0; i < out.size(); ++i) out[i] = uint8_t(std::stoi(std::string(hex.substr(2 * i, 2)), nullptr, 16));
  return out;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(quantization)

BOOST_AUTO_TEST_CASE(ggml_dequantisation_equals_gguf_py) {
  simdjson::dom::parser parser;
  simdjson::dom::element golden = parser.load(FTLLM_SOURCE_ROOT "/tests/data/quant/ggml_blocks.json");
  for (const GgmlLayout& g : kGgml) {
    std::string key;
    for (char c : dtype_name(g.type)) key += char(std::toupper(static_cast<unsigned char>(c)));
    simdjson::dom::element entry = golden[key];
    std::vector<uint8_t> bytes = from_hex(std::string_view(entry["bytes"]));
    std::vector<float> want;
    for (double v : entry["values"].get_array()) want.push_back(float(v));
    BOOST_REQUIRE(fits_rows(g.type, int64_t(want.size())));
    BOOST_REQUIRE_EQUAL(bytes.size(), row_bytes(g.type, int64_t(want.size())));
    std::vector<float> got(want.size());
    quant::dequantize_row(g.type, bytes.data(), got.data(), int64_t(want.size()));
    size_t differ = 0;
    for (size_t i = 0; i < want.size(); ++i) differ += got[i] != want[i];
    BOOST_TEST(differ == 0u, key << ": " << differ << " of " << want.size() << " values differ from gguf-py");
  }
}

// OCP microscaling: e2m1 is sign, two exponent bits (bias 1) and one mantissa bit, exponent 0 subnormal;
// e8m0 is 2^(e - 127). ggml keeps twice each e2m1 value and half each scale; the product is the same.
BOOST_AUTO_TEST_CASE(mxfp4_codes_follow_the_ocp_definition) {
  for (int c = 0; c < 16; ++c) {
    const int exp = (c >> 1) & 3, mant = c & 1;
    const double value = (exp == 0 ? 0.5 * mant : (1 + 0.5 * mant) * std::ldexp(1.0, exp - 1)) * (c & 8 ? -1 : 1);
    BOOST_TEST(quant::decode::e2m1_doubled(c) == 2 * value, "code " << c);
  }
  for (int e = 0; e < 255; ++e) BOOST_TEST(double(quant::decode::e8m0_half(uint8_t(e))) == std::ldexp(1.0, e - 128), "exponent " << e);
}

BOOST_AUTO_TEST_CASE(mxfp4_quantizes_as_gguf_py) {
  simdjson::dom::parser parser;
  simdjson::dom::element golden = parser.load(FTLLM_SOURCE_ROOT "/tests/data/quant/ggml_blocks.json")["MXFP4 quantized"];
  std::vector<float> x;
  for (double v : golden["input"].get_array()) x.push_back(float(v));
  const std::vector<uint8_t> want = from_hex(std::string_view(golden["bytes"]));
  BOOST_REQUIRE_EQUAL(want.size(), row_bytes(DType::MXFP4, int64_t(x.size())));
  std::vector<uint8_t> got(want.size());
  quant::quantize_row(DType::MXFP4, x.data(), int64_t(x.size()), got.data());
  for (size_t i = 0; i < got.size(); ++i) BOOST_TEST(int(got[i]) == int(want[i]), "byte " << i << " of block " << i / 17);
}

BOOST_AUTO_TEST_CASE(e4m3_follows_its_definition) {
  BOOST_TEST(quant::e4m3_to_f32(0x38) == 1.0f);
  BOOST_TEST(quant::e4m3_to_f32(0x7e) == 448.0f);
  BOOST_TEST(quant::e4m3_to_f32(0xfe) == -448.0f);
  BOOST_TEST(quant::e4m3_to_f32(0x08) == std::ldexp(1.0f, -6));  // smallest normal
  BOOST_TEST(quant::e4m3_to_f32(0x01) == std::ldexp(1.0f, -9));  // smallest subnormal
  BOOST_TEST(std::isnan(quant::e4m3_to_f32(0x7f)));
  BOOST_TEST(quant::f32_to_e4m3(1000.0f) == 0x7e);  // saturates
  BOOST_TEST(quant::f32_to_e4m3(-1e9f) == 0xfe);
  // Every code decodes and encodes back; between two neighbours the midpoint goes to the even code
  // and anything nearer one goes to it.
  for (int c = 0; c < 0x7e; ++c) {
    const float a = quant::e4m3_to_f32(uint8_t(c)), b = quant::e4m3_to_f32(uint8_t(c + 1)), mid = (a + b) / 2;
    BOOST_REQUIRE_EQUAL(int(quant::f32_to_e4m3(a)), c);
    BOOST_REQUIRE_EQUAL(int(quant::f32_to_e4m3(-b)), (c + 1) | 0x80);
    BOOST_REQUIRE_EQUAL(int(quant::f32_to_e4m3(mid)), (c & 1) ? c + 1 : c);
    BOOST_REQUIRE_EQUAL(int(quant::f32_to_e4m3(std::nextafter(mid, a))), c);
    BOOST_REQUIRE_EQUAL(int(quant::f32_to_e4m3(std::nextafter(mid, b))), c + 1);
  }
}

BOOST_AUTO_TEST_CASE(quantizers_round_trip_within_their_bounds) {
  std::mt19937 rng(3);
  const int64_t k = 512;
  std::vector<std::vector<float>> rows = {random_floats(k, rng, 0.05f), random_floats(k, rng, 3.0f),
                                          std::vector<float>(k, 0.0f), std::vector<float>(k, 0.25f)};
  rows[0][17] = 2.0f;  // an outlier widens its group's range
  for (DType t : kOurs)
    for (const std::vector<float>& x : rows) {
      std::vector<uint8_t> q(row_bytes(t, k));
      std::vector<float> back(k);
      quant::quantize_row(t, x.data(), k, q.data());
      quant::dequantize_row(t, q.data(), back.data(), k);
      const int64_t g = t == DType::I8 || t == DType::I4 ? k : dtype_layout(t).block_values;
      for (int64_t start = 0; start < k; start += g) {
        float lo = x[size_t(start)], hi = lo, amax = 0;
        for (int64_t i = start; i < start + g; ++i)
          lo = std::min(lo, x[size_t(i)]), hi = std::max(hi, x[size_t(i)]), amax = std::max(amax, std::fabs(x[size_t(i)]));
        for (int64_t i = start; i < start + g; ++i) {
          const float v = x[size_t(i)], err = std::fabs(back[size_t(i)] - v);
          float bound;
          if (t == DType::I8) bound = amax / 127 / 2;
          else if (t == DType::FP8) bound = std::max(std::fabs(v) / 16, amax / 448 * std::ldexp(1.0f, -10));
          else if (t == DType::I4) bound = (hi - lo) / 15 / 2;
          else bound = (hi - lo) / 15 / 2 * 1.02f + std::fabs(lo) * 1e-3f;  // float16 scale and minimum
          BOOST_REQUIRE_MESSAGE(err <= bound * 1.0001f + 1e-7f, dtype_name(t) << " value " << i << ": " << v << " came back as "
                                                                           << back[size_t(i)] << ", bound " << bound);
        }
      }
    }
}

BOOST_AUTO_TEST_CASE(q8_activations_are_the_same_bytes_on_every_path) {
  if (!cpu::avx2_kernels()) return;
  std::mt19937 rng(5);
  auto x = random_floats(1024, rng, 2.0f);
  x[40] = 0;  // a block of zeros must not divide by zero
  for (int i = 64; i < 96; ++i) x[size_t(i)] = 0;
  std::vector<cpu::Q8Block> a(32), b(32);
  cpu::scalar_kernels().quantize_q8(x.data(), 1024, a.data());
  cpu::avx2_kernels()->quantize_q8(x.data(), 1024, b.data());
  for (size_t i = 0; i < a.size(); ++i) {
    BOOST_REQUIRE(std::memcmp(a[i].q, b[i].q, 32) == 0);
    BOOST_REQUIRE_EQUAL(a[i].d, b[i].d);
    BOOST_REQUIRE_EQUAL(a[i].s, b[i].s);
    BOOST_REQUIRE_EQUAL(a[i].sum, b[i].sum);
    float amax = 0;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[i * 32 + size_t(j)]));
    for (int j = 0; j < 32; ++j)  // each value within half a step (of the unrounded scale) of the input
      BOOST_REQUIRE(std::fabs(a[i].q[j] * (amax / 127) - x[i * 32 + size_t(j)]) <= amax / 127 * 0.5001f + 1e-7f);
  }
}

// q8_K style: one float32 scale per 256 values, the blocks' bytes the same on every path.
BOOST_AUTO_TEST_CASE(q8_256_activations_share_a_scale_per_super_block) {
  std::mt19937 rng(6);
  auto x = random_floats(1024, rng, 2.0f);
  x[300] = 40.0f;  // one large value sets the scale of its whole super-block
  for (int i = 512; i < 768; ++i) x[size_t(i)] = 0;
  std::vector<cpu::Q8Block> a(32), b(32);
  cpu::scalar_kernels().quantize_q8_256(x.data(), 1024, a.data());
  for (const cpu::Kernels* table : fast_tables()) {
    table->quantize_q8_256(x.data(), 1024, b.data());
    for (size_t i = 0; i < a.size(); ++i) {
      BOOST_REQUIRE(std::memcmp(a[i].q, b[i].q, 32) == 0);
      BOOST_REQUIRE_EQUAL(a[i].d, b[i].d);
      BOOST_REQUIRE_EQUAL(a[i].sum, b[i].sum);
    }
  }
  for (size_t i = 0; i < a.size(); ++i) BOOST_REQUIRE_EQUAL(a[i].d, a[i / 8 * 8].d);
  BOOST_TEST(a[8].d == 40.0f / 127.0f);
  BOOST_TEST(a[9].q[300 - 288] == 127);
  BOOST_TEST(a[16].d == 0.0f);
  BOOST_TEST(cpu::q8_per_256(DType::Q4_K));
  BOOST_TEST(!cpu::q8_per_256(DType::Q4_0));
}

BOOST_AUTO_TEST_CASE(every_dtype_matmul_matches_the_reference) {
  const cpu::Kernels& ref = cpu::scalar_kernels();
  BOOST_TEST_MESSAGE("vectorised tables on this CPU: " << fast_tables().size());
  for (const cpu::Kernels* table : fast_tables()) {
  const cpu::Kernels& fast = *table;
  BOOST_TEST_MESSAGE("checking " << fast.name);
  std::mt19937 rng(9);
  const int64_t K = 512, N = 19, M = 5, nb = K / 32;
  for (DType t : kAllDTypes) {
    std::vector<uint8_t> w = random_rows(t, N, K, rng);
    auto x = random_floats(size_t(M * K), rng);
    std::vector<float> want(static_cast<size_t>(M * N)), got(want.size()), alone(want.size()), wrow(static_cast<size_t>(K));
    std::vector<cpu::Q8Block> xq(size_t(M * nb));
    // The reference quantizer (the same bytes as the fast ones, tested above), in the blocks `fast` wants.
    for (int64_t m = 0; m < M; ++m)
      (cpu::q8_per_256(t) ? ref.quantize_q8_256 : ref.quantize_q8)(x.data() + m * K, K, xq.data() + m * nb);
    ref.matmul(t, x.data(), nullptr, M, K, w.data(), 1, N, want.data(), N);
    fast.matmul(t, x.data(), xq.data(), M, K, w.data(), 1, N, got.data(), N);
    for (int64_t m = 0; m < M; ++m)
      fast.matmul(t, x.data() + m * K, xq.data() + m * nb, 1, K, w.data(), 1, N, alone.data() + m * N, N);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 1; n < N; ++n) {
        const size_t i = size_t(m * N + n);
        BOOST_REQUIRE_MESSAGE(got[i] == alone[i], dtype_name(t) << ": batched and alone differ");
        quant::dequantize_row(t, w.data() + size_t(n) * row_bytes(t, K), wrow.data(), K);
        double oracle = 0, magnitude = 0;
        for (int64_t k = 0; k < K; ++k) {
          // With int8 activations the kernel must compute exactly on the quantized activations.
          const cpu::Q8Block& blk = xq[size_t(m * nb + k / 32)];
          const double xv = fast.uses_q8(t) ? double(blk.d) * blk.q[k % 32] : double(x[size_t(m * K + k)]);
          oracle += double(wrow[size_t(k)]) * xv;
          magnitude += std::fabs(double(wrow[size_t(k)]) * xv);
        }
        if (t == DType::Q4_1)  // llama.cpp's q8_1 carries d * sum(q) rounded to float16 for the minimum's term
          for (int64_t b = 0; b < nb; ++b) {
            const auto& blk = reinterpret_cast<const quant::BlockQ4_1*>(w.data() + size_t(n) * row_bytes(t, K))[b];
            const cpu::Q8Block& a = xq[size_t(m * nb + b)];
            oracle += double(f16_to_f32(blk.m)) * (double(a.s) - double(a.d) * a.sum);
          }
        BOOST_REQUIRE_MESSAGE(std::fabs(got[i] - oracle) <= 2e-5 * magnitude + 1e-6,
                              fast.name << " " << dtype_name(t) << " [" << m << "," << n << "]: " << got[i] << " vs " << oracle);
        // And the reference itself: float32 activations, within what int8 rounding of them can move.
        double bound = 2e-5 * magnitude + 1e-6;
        if (fast.uses_q8(t))
          for (int64_t k = 0; k < K; ++k) {
            const cpu::Q8Block& blk = xq[size_t(m * nb + k / 32)];
            bound += std::fabs(wrow[size_t(k)]) * (std::fabs(double(blk.d) * blk.q[k % 32] - x[size_t(m * K + k)]) + 1e-3 * std::fabs(x[size_t(m * K + k)]));
          }
        BOOST_REQUIRE_MESSAGE(std::fabs(double(got[i]) - want[i]) <= bound,
                              fast.name << " " << dtype_name(t) << " vs reference [" << m << "," << n << "]: " << got[i] << " vs " << want[i]);
      }
  }
  }
}

BOOST_AUTO_TEST_CASE(four_and_five_bit_dots_stay_exact_at_their_extremes) {
  // The one-row kernel narrows its block dots' lanes to int16 for weights of at most 31 (two rows of
  // nibbles to a register, or sums of eight products): exact only within that bound, so here every
  // weight but a block's first sits at its type's top value and every activation at +-127, the largest
  // sums the narrowing can meet. (Q8_0 and int8 would overflow it: they are here to show they do not take it.)
  // The K-quants' one-row kernels add byte pairs in int16 too (Q6_K's less their offset 32 * (x + x')).
  // ggml's types have no quantizer here: their blocks are written directly, every value bit set (Q8_0's
  // values 127, MXFP4's exponent 2^-1) and the float16 scales and minimums 1.
  const int64_t K = 512, N = 21, nb = K / 32;
  std::vector<float> row(static_cast<size_t>(K));
  for (DType t : {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::MXFP4, DType::I4, DType::I4G32, DType::I4G128,
                  DType::Q8_0, DType::I8, DType::Q2_K, DType::Q3_K, DType::Q4_K, DType::Q5_K, DType::Q6_K}) {
    std::vector<uint8_t> w(size_t(N) * row_bytes(t, K));
    if (quant::can_quantize_to(t)) {
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t k = 0; k < K; ++k) row[size_t(k)] = (k % 32 ? 0.875f : -1.0f) * float(1 + n % 3);
        quant::quantize_row(t, row.data(), K, w.data() + size_t(n) * row_bytes(t, K));
      }
    } else {
      std::fill(w.begin(), w.end(), t == DType::Q8_0 ? 0x7f : 0xff);
      const size_t block = dtype_layout(t).block_bytes;
      for (const test::GgmlLayout& g : kGgml)
        if (g.type == t)
          for (size_t at = 0; at < w.size(); at += block) {
            for (size_t f : g.scales) w[at + f] = 0x00, w[at + f + 1] = 0x3c;  // float16 1.0
            for (size_t f : g.mins) w[at + f] = 0x00, w[at + f + 1] = 0x3c;
            for (size_t f : g.exponents) w[at + f] = 126;
          }
    }
    for (const cpu::Kernels* table : fast_tables())
      for (float sign : {1.0f, -1.0f}) {
        const std::vector<float> x(size_t(K), sign);
        std::vector<cpu::Q8Block> xq(static_cast<size_t>(nb));
        cpu::quantize_activations(*table, t, x.data(), K, xq.data());
        std::vector<float> got(static_cast<size_t>(N)), wrow(static_cast<size_t>(K));
        table->matmul(t, x.data(), xq.data(), 1, K, w.data(), 0, N, got.data(), N);
        for (int64_t n = 0; n < N; ++n) {
          quant::dequantize_row(t, w.data() + size_t(n) * row_bytes(t, K), wrow.data(), K);
          double oracle = 0, magnitude = 0;
          for (int64_t k = 0; k < K; ++k) {
            const cpu::Q8Block& blk = xq[size_t(k / 32)];
            const double xv = table->uses_q8(t) ? double(blk.d) * blk.q[k % 32] : double(x[size_t(k)]);
            oracle += double(wrow[size_t(k)]) * xv;
            magnitude += std::fabs(double(wrow[size_t(k)]) * xv);
          }
          if (t == DType::Q4_1 || t == DType::Q5_1)  // the minimum meets d * sum(q) rounded to float16, as llama.cpp's q8_1
            for (int64_t b = 0; b < nb; ++b) {
              uint16_t m;  // Q4_1 and Q5_1 blocks start with float16 d, then m
              std::memcpy(&m, w.data() + size_t(n) * row_bytes(t, K) + size_t(b) * row_bytes(t, 32) + 2, 2);
              oracle += double(f16_to_f32(m)) * (double(xq[size_t(b)].s) - double(xq[size_t(b)].d) * xq[size_t(b)].sum);
            }
          BOOST_REQUIRE_MESSAGE(std::fabs(got[size_t(n)] - oracle) <= 2e-5 * magnitude + 1e-6,
                                table->name << " " << dtype_name(t) << " row " << n << " x=" << sign << ": " << got[size_t(n)] << " vs " << oracle);
        }
      }
  }
}

BOOST_AUTO_TEST_CASE(every_row_is_the_same_alone_or_in_a_batch_of_1_to_64) {
  // The batching promise on the GEMM path: row m of a batch of M equals row m computed alone, bit for
  // bit, for every M the step may have (tails of the 8-row lane groups, the 2-group and 1-group tiles,
  // the float tiles' 4-row groups) and for weight-row counts that leave the 4- and 8-row tiles a tail. Every
  // type: the integer kernels, the float ones (also with K leaving 16- and 8-element tails, and K = 4108,
  // whose F32 rows go in L2 tiles of 12) and the types
  // widened to float; K = 24576 for the integer kernels, whose 64 rows then go in two blocks of 32 (2 MB
  // of quantized rows at most). The float rows of every table are also the AVX2 table's, bit for bit.
  std::mt19937 rng(21);
  const int64_t N = 27;  // rows 1-26: three 8-row passes of the few-rows kernel and a tail
  const cpu::Kernels* avx2 = cpu::avx2_kernels();
  for (const cpu::Kernels* table : fast_tables())
    for (DType t : kAllDTypes)
      for (int64_t K : is_float(t) ? std::vector<int64_t>{4108, 768, 100, 24, 7} : std::vector<int64_t>{768, 24576}) {
        const int64_t nb = K / 32;  // K = 768: whole super-blocks for the K-quants
        std::vector<uint8_t> w = random_rows(t, N, K, rng);
        auto x = random_floats(size_t(64 * K), rng);
        std::vector<cpu::Q8Block> xq(size_t(64 * std::max<int64_t>(nb, 1)));
        if (table->uses_q8(t))
          for (int64_t m = 0; m < 64; ++m) cpu::quantize_activations(*table, t, x.data() + m * K, K, xq.data() + m * nb);
        std::vector<float> alone(size_t(64 * N)), avx2_alone(static_cast<size_t>(N));
        for (int64_t m = 0; m < 64; ++m) {
          table->matmul(t, x.data() + m * K, xq.data() + m * nb, 1, K, w.data(), 0, N, alone.data() + m * N, N);
          if (!is_float(t) || m % 7) continue;
          avx2->matmul(t, x.data() + m * K, nullptr, 1, K, w.data(), 0, N, avx2_alone.data(), N);
          for (int64_t n = 0; n < N; ++n)
            BOOST_REQUIRE_MESSAGE(float_bits(avx2_alone[size_t(n)]) == float_bits(alone[size_t(m * N + n)]),
                                  table->name << " " << dtype_name(t) << " K=" << K << " row " << m << " differs from avx2's");
        }
        for (int64_t M : {2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 24, 33, 64}) {
          std::vector<float> batched(size_t(M * N), -1.0f);
          table->matmul(t, x.data(), xq.data(), M, K, w.data(), 1, N, batched.data(), N);
          for (int64_t m = 0; m < M; ++m) {
            BOOST_REQUIRE_MESSAGE(batched[size_t(m * N)] == -1.0f, table->name << " " << dtype_name(t) << " wrote outside [n0, n1)");
            for (int64_t n = 1; n < N; ++n)
              BOOST_REQUIRE_MESSAGE(float_bits(batched[size_t(m * N + n)]) == float_bits(alone[size_t(m * N + n)]),
                                    table->name << " " << dtype_name(t) << " K=" << K << " M=" << M << " row " << m << " col " << n << ": "
                                                << batched[size_t(m * N + n)] << " batched vs " << alone[size_t(m * N + n)] << " alone");
          }
        }
      }
}

// The AVX2 GEMM keeps a thread's unpacked copy of the K-quant weight rows it is on for the activation
// groups that follow; weights rewritten in place between two calls (a model loaded into the same buffer)
// are read anew, never from the copy the last call made.
BOOST_AUTO_TEST_CASE(a_batch_reads_weights_rewritten_in_place_anew) {
  std::mt19937 rng(33);
  const int64_t K = 512, M = 40, nb = K / 32;  // five groups of eight rows: tiles of two and one
  // One weight row (the second call's first tile is the first call's last) and nine (tiles of two, then one).
  for (const int64_t N : {1, 9})
  for (const cpu::Kernels* table : fast_tables())
    for (DType t : kAllDTypes) {
      if (!table->uses_q8(t)) continue;
      std::vector<uint8_t> w = random_rows(t, N, K, rng);
      const std::vector<uint8_t> other = random_rows(t, N, K, rng);
      const auto x = random_floats(size_t(M * K), rng);
      std::vector<cpu::Q8Block> xq(size_t(M * nb));
      for (int64_t m = 0; m < M; ++m) cpu::quantize_activations(*table, t, x.data() + m * K, K, xq.data() + m * nb);
      std::vector<float> before(size_t(M * N)), got(before.size()), want(before.size());
      table->matmul(t, x.data(), xq.data(), M, K, w.data(), 0, N, before.data(), N);
      std::copy(other.begin(), other.end(), w.begin());
      table->matmul(t, x.data(), xq.data(), M, K, w.data(), 0, N, got.data(), N);
      table->matmul(t, x.data(), xq.data(), M, K, other.data(), 0, N, want.data(), N);
      BOOST_TEST(before != want, dtype_name(t) << ": the two weights give the same products");
      BOOST_TEST(std::memcmp(got.data(), want.data(), got.size() * 4) == 0, table->name << " " << dtype_name(t) << " N=" << N << ": read the old weights");
    }
}

BOOST_AUTO_TEST_CASE(fp8_rows_widen_to_the_dequantized_values) {
  // The float kernels meet fp8 rows widened by a vector reader: its values must be dequantize_row's, so
  // the result is the float32 kernel's on the dequantized rows, bit for bit (scales from tiny to large).
  std::mt19937 rng(5);
  const int64_t K = 384, N = 9;
  std::vector<float> src = random_floats(size_t(N * K), rng);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) src[size_t(n * K + k)] *= std::pow(10.0f, float(n) - 5.0f);
  std::vector<uint8_t> w(size_t(N) * row_bytes(DType::FP8, K));
  std::vector<float> widened(size_t(N * K));
  for (int64_t n = 0; n < N; ++n) {
    quant::quantize_row(DType::FP8, src.data() + n * K, K, w.data() + size_t(n) * row_bytes(DType::FP8, K));
    quant::dequantize_row(DType::FP8, w.data() + size_t(n) * row_bytes(DType::FP8, K), widened.data() + n * K, K);
  }
  for (const cpu::Kernels* table : fast_tables())
    for (int64_t M : {1, 2, 3}) {
      const auto x = random_floats(size_t(M * K), rng);
      std::vector<float> got(size_t(M * N)), want(size_t(M * N));
      table->matmul(DType::FP8, x.data(), nullptr, M, K, w.data(), 0, N, got.data(), N);
      table->matmul(DType::F32, x.data(), nullptr, M, K, widened.data(), 0, N, want.data(), N);
      for (size_t i = 0; i < got.size(); ++i)
        BOOST_REQUIRE_MESSAGE(float_bits(got[i]) == float_bits(want[i]), table->name << " M=" << M << " output " << i << ": " << got[i] << " vs " << want[i]);
    }
}

BOOST_AUTO_TEST_CASE(amx_tiles_give_the_vnni_kernels_bits) {
  // The AMX GEMM (in hardware where this CPU has it, emulated wherever AVX-512 VNNI is) against the VNNI
  // table, bit for bit: several panels of 16 weight rows and groups of 16 activation rows, with the
  // leftovers of both (M % 16 rows, weight rows past the last panel, a panel starting at an odd row),
  // odd and even block and super-block counts (its two-block pipeline's tail), every type it takes.
  const cpu::Kernels* vnni = cpu::avx512vnni_kernels();
  if (!vnni) {
    BOOST_TEST_MESSAGE("no AVX-512 VNNI here: the AMX GEMM (emulated or not) cannot run");
    return;
  }
  // The self-check that gates the hardware table passes on the emulated one.
  if (const cpu::Kernels* emulated = cpu::avx512amx_emulated_kernels()) BOOST_TEST(cpu::avx512amx_matches_vnni(*emulated));
  BOOST_TEST_MESSAGE("AMX in hardware: " << (cpu::avx512amx_kernels() ? "yes" : "no") << " (" << cpu::kernels_description(*vnni) << ")");
  const std::vector<DType> types = {DType::Q4_0, DType::Q4_1, DType::Q5_0, DType::Q5_1, DType::Q8_0, DType::MXFP4,
                                    DType::I8,   DType::I4,   DType::I4G32, DType::I4G64, DType::I4G128, DType::I4G256,
                                    DType::Q4_K, DType::Q5_K, DType::Q6_K};
  std::mt19937 rng(33);
  for (const cpu::Kernels* amx : {cpu::avx512amx_kernels(), cpu::avx512amx_emulated_kernels()}) {
    if (!amx) continue;
    for (DType t : types) {
      BOOST_REQUIRE_MESSAGE(cpu::avx512vnni::amx_type(t).supported, dtype_name(t) << " should take the AMX path");
      for (int64_t K : {32, 288, 512, 768}) {  // 768: three super-blocks
        if (!fits_rows(t, K)) continue;
        const int64_t N = 53, nb = K / 32;
        std::vector<uint8_t> w = random_rows(t, N, K, rng);
        // Rows from the fewest the tiles take: whole groups of 16 and a leftover, and more groups.
        const int64_t least = cpu::amx_min_rows(t), most = least + 18;
        auto x = random_floats(size_t(most * K), rng);
        std::vector<cpu::Q8Block> xq(size_t(most * nb));
        for (int64_t m = 0; m < most; ++m) cpu::quantize_activations(*vnni, t, x.data() + m * K, K, xq.data() + m * nb);
        for (int64_t M : {least, least + 1, most})
          for (int64_t n0 : {0, 3}) {
            std::vector<float> want(size_t(M * N), -1.0f), got(size_t(M * N), -1.0f);
            vnni->matmul(t, x.data(), xq.data(), M, K, w.data(), n0, N, want.data(), N);
            amx->matmul(t, x.data(), xq.data(), M, K, w.data(), n0, N, got.data(), N);
            for (int64_t i = 0; i < M * N; ++i)
              BOOST_REQUIRE_MESSAGE(float_bits(got[size_t(i)]) == float_bits(want[size_t(i)]),
                                    amx->name << " " << dtype_name(t) << " K=" << K << " M=" << M << " n0=" << n0 << " [" << i / N << ","
                                              << i % N << "]: " << got[size_t(i)] << " vs " << want[size_t(i)]);
          }
      }
    }
  }
  // The types with nothing to gain (widened to float) are not AMX's.
  BOOST_TEST(!cpu::avx512vnni::amx_type(DType::Q2_K).supported);
}

BOOST_AUTO_TEST_CASE(amx_is_named_and_explained) {
  // --kernels avx512amx runs the AMX table where it can; elsewhere it is refused saying why, and the
  // status line of a CPU with AMX that does not use it says so.
  if (cpu::avx512amx_kernels()) {
    BOOST_TEST(std::string(cpu::kernels_named("avx512amx").name) == "avx512amx");
    BOOST_TEST(std::string(cpu::best_kernels().name) == "avx512amx");
    BOOST_TEST(cpu::kernels_description(*cpu::avx512amx_kernels()) == "avx512amx");
    BOOST_TEST(cpu::kernels_description(cpu::scalar_kernels()) == "scalar (AMX available, not chosen)");
  } else {
    try {
      cpu::kernels_named("avx512amx");
      BOOST_FAIL("avx512amx was accepted on a machine without it");
    } catch (const EngineError& e) {
      BOOST_TEST_MESSAGE(e.what());
      BOOST_TEST(std::string(e.what()).find("kernels avx512amx are unavailable: ") == 0);
      BOOST_TEST(std::string(e.what()).find("use auto, avx512vnni") != std::string::npos);
    }
    BOOST_TEST(std::string(cpu::best_kernels().name) != "avx512amx");
  }
}

BOOST_AUTO_TEST_CASE(dtype_names_parse_as_fastllm_spells_them) {
  BOOST_TEST((parse_dtype("int4g").value() == DType::I4G128));
  BOOST_TEST((parse_dtype("int4g64").value() == DType::I4G64));
  BOOST_TEST((parse_dtype("INT8").value() == DType::I8));
  BOOST_TEST((parse_dtype("float16").value() == DType::F16));
  BOOST_TEST((parse_dtype("bf16").value() == DType::BF16));
  BOOST_TEST((parse_dtype("fp8").value() == DType::FP8));
  BOOST_TEST(!parse_dtype("int3").has_value());
  BOOST_TEST(!parse_dtype("int4g100").has_value());
  for (DType t : kAllDTypes) BOOST_TEST((parse_dtype(dtype_name(t)).value() == t));
}

BOOST_AUTO_TEST_SUITE_END()
