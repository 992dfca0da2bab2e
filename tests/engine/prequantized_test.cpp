// Pre-quantized checkpoints (tests/data/quantized, by tests/tools/make_quantized_checkpoints.py): FP8
// with 128 x 128 block scales and AWQ 4-bit, against their dequantized float32 twins made by numpy and
// ml_dtypes. Reference kernels on both sides, so only the readers are compared. And gpt-oss with MXFP4
// experts as OpenAI ships it (tests/tools/make_fixtures.py mxfp4), against transformers reading it.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "../common/exact_options.h"
#include "../common/fixture_reference.h"
#include "../common/greedy_run.h"
#include "../common/logit_error.h"
#include "cpu/kernels.h"
#include "runner/model_instance.h"
#include "../common/model_run.h"

using namespace ftllm;

namespace {

std::unique_ptr<ModelInstance> load(const std::string& name, const std::string& dtype = "auto",
                                    const std::string& moe_dtype = "auto", const std::string& kernels = "scalar") {
  ModelLoadOptions o = test::exact_options();
  o.moe_dtype = moe_dtype;
  o.path = FTLLM_SOURCE_ROOT "/tests/data/quantized/" + name;
  o.threads = 2;
  o.context_length = 128;
  o.max_sequences = 1;
  o.kernels = kernels;
  o.dtype = dtype;
  return ModelInstance::load(o);
}

const std::vector<int32_t> kPrompt = {1, 200, 13, 77, 4, 150, 9, 31, 255, 0, 64};

double max_error(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, test::difference(a[i], b[i]));
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(prequantized_checkpoints)

BOOST_AUTO_TEST_CASE(fp8_block_scaled_weights_compute_exactly_their_values) {
  auto fp8 = load("fp8"), ref = load("fp8-ref");
  BOOST_TEST(fp8->dtypes() == "float32, fp8");
  const int64_t last = int64_t(kPrompt.size()) - 1;
  // e4m3 value times its block's scale is the same float32 product on both sides: bit for bit.
  BOOST_TEST(test::prompt_logits(*fp8, kPrompt, {last})[0] == test::prompt_logits(*ref, kPrompt, {last})[0]);
}

BOOST_AUTO_TEST_CASE(awq_weights_become_int4g128_within_float16_rounding_of_the_minimum) {
  auto awq = load("awq"), ref = load("awq-ref");
  BOOST_TEST(awq->dtypes() == "float32, int4g128");
  const int64_t last = int64_t(kPrompt.size()) - 1;
  auto got = test::prompt_logits(*awq, kPrompt, {last})[0], want = test::prompt_logits(*ref, kPrompt, {last})[0];
  const double err = max_error(got, want);
  BOOST_TEST_MESSAGE("AWQ: max |logit error| " << err);
  BOOST_TEST(err < 2e-3);  // -zero * scale kept in float16: at most 2^-11 of 15 steps per weight
}

BOOST_AUTO_TEST_CASE(prequantized_weights_convert_further_with_dtype) {
  auto fp8 = load("fp8", "int4g128");
  BOOST_TEST(fp8->dtypes() == "float32, int4g128");
  auto ref = load("fp8-ref", "int4g128");
  const int64_t last = int64_t(kPrompt.size()) - 1;
  BOOST_TEST(test::prompt_logits(*fp8, kPrompt, {last})[0] == test::prompt_logits(*ref, kPrompt, {last})[0]);
}

// DeepSeek V3 as DeepSeek ships it: FP8 linear weights (MLA's kv_b_proj included, widened for the
// absorbed attention), float32 router; and with --moe_dtype int4g the experts convert while loading.
BOOST_AUTO_TEST_CASE(deepseek_fp8_loads_and_converts_its_experts_with_moe_dtype) {
  const int64_t last = int64_t(kPrompt.size()) - 1;
  auto fp8 = load("deepseek-fp8"), ref = load("deepseek-fp8-ref");
  BOOST_TEST(fp8->dtypes() == "float32, fp8");
  const std::vector<float> plain = test::prompt_logits(*fp8, kPrompt, {last})[0];
  BOOST_TEST(plain == test::prompt_logits(*ref, kPrompt, {last})[0]);
  auto mixed = load("deepseek-fp8", "auto", "int4g");
  BOOST_TEST(mixed->dtypes() == "float32, fp8, int4g128");
  for (auto& [name, t] : mixed->model().named_tensors())
    if (name.find(".mlp.experts.") != std::string::npos) BOOST_TEST((t->dtype == DType::I4G128), name);
  const std::vector<float> converted = test::prompt_logits(*mixed, kPrompt, {last})[0];
  BOOST_TEST(converted == test::prompt_logits(*load("deepseek-fp8-ref", "auto", "int4g"), kPrompt, {last})[0]);
  BOOST_TEST(max_error(converted, plain) > 0.0);  // the experts did change
}

// gpt-oss's experts as MXFP4 blocks (OpenAI's layout, repacked to ggml's at load) compute what
// transformers computes after dequantizing them: on the reference kernels to float32 rounding; on each
// integer kernel within what int8 activations move (measured 0.007); and --moe_dtype converts them.
BOOST_AUTO_TEST_CASE(gpt_oss_mxfp4_experts_compute_what_transformers_computed) {
  const test::Reference ref = test::read_reference(FTLLM_SOURCE_ROOT "/tests/data/quantized/gpt-oss-mxfp4");
  const int64_t last = int64_t(ref.prompt.size()) - 1;
  auto logits_error = [&](ModelInstance& m) { return test::relative_error(test::prompt_logits(m, ref.prompt, {last})[0], ref.last_logits); };
  auto mx = load("gpt-oss-mxfp4");
  BOOST_TEST(mx->dtypes() == "float32, mxfp4");
  std::vector<int32_t> all = ref.prompt;
  all.insert(all.end(), ref.greedy.begin(), ref.greedy.end() - 1);
  const double prefill = logits_error(*mx), decode = test::relative_error(test::decode_logits(*mx, all, ref.prompt.size()), ref.final_logits);
  BOOST_TEST_MESSAGE("gpt-oss MXFP4, reference kernels: prefill " << prefill << ", decode " << decode);
  BOOST_TEST(prefill < 1e-4);
  BOOST_TEST(decode < 1e-4);
  BOOST_TEST(test::greedy(*mx, ref.prompt, int32_t(ref.greedy.size())) == ref.greedy, boost::test_tools::per_element());

  for (const cpu::Kernels* k : {cpu::avx2_kernels(), cpu::avx512vnni_kernels(), cpu::avx512amx_kernels()}) {
    if (!k) continue;
    const double err = logits_error(*load("gpt-oss-mxfp4", "auto", "auto", k->name));
    BOOST_TEST_MESSAGE("gpt-oss MXFP4, " << k->name << ": prefill " << err);
    BOOST_TEST(err < 0.05, k->name);
    BOOST_TEST(err > 0.0, k->name);  // the int8 activations did round
  }

  auto int8 = load("gpt-oss-mxfp4", "auto", "int8");
  BOOST_TEST(int8->dtypes() == "float32, int8");
  const double converted = logits_error(*int8);
  BOOST_TEST_MESSAGE("gpt-oss MXFP4 --moe_dtype int8: " << converted);
  BOOST_TEST(converted > 0.0);
  BOOST_TEST(converted < 0.05);
}

BOOST_AUTO_TEST_SUITE_END()
