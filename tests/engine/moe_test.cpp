// Mixture of experts: routing and the expert op against plain per-token arithmetic, and the options that
// change them (--moe_experts against transformers' logits with num_experts_per_tok changed, --moe_dtype,
// fused expert checkpoints, options that do not apply).
#include <simdjson.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <random>

#include "core/error.h"
#include "cpu/kernels.h"
#include "cpu/numa_topology.h"
#include "cpu/thread_pool.h"
#include "model/safetensors.h"
#include "../common/exact_options.h"
#include "../common/logit_error.h"
#include "runner/model_instance.h"
#include "../common/model_run.h"
#include "runner/placement.h"
#include "ops/moe.h"
#include "quant/quant.h"

namespace fs = std::filesystem;
using namespace ftllm;

namespace {

const fs::path kModels = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data" / "models";

Tensor random_matrix(DType t, int64_t rows, int64_t cols, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 0.3f);
  std::vector<float> v(static_cast<size_t>(rows * cols));
  for (float& x : v) x = normal(rng);
  Tensor w = Tensor::zeros(t, {rows, cols});
  for (int64_t r = 0; r < rows; ++r)
    quant::quantize_row(t, v.data() + r * cols, cols, static_cast<uint8_t*>(w.data) + size_t(r) * row_bytes(t, cols));
  return w;
}

// One token through one expert with the scalar reference kernels, one matrix row at a time.
std::vector<double> expert_reference(const ops::Expert& e, const float* x, int64_t H) {
  const int64_t I = e.gate.dim(0);
  std::vector<float> g(static_cast<size_t>(I)), u(static_cast<size_t>(I)), row(static_cast<size_t>(std::max(H, I)));
  auto dot_row = [&](const Tensor& w, int64_t r, const float* v, int64_t K) {
    quant::dequantize_row(w.dtype, static_cast<const char*>(w.data) + size_t(r) * row_bytes(w.dtype, K), row.data(), K);
    double s = 0;
    for (int64_t k = 0; k < K; ++k) s += double(row[size_t(k)]) * v[k];
    return s;
  };
  for (int64_t i = 0; i < I; ++i) g[size_t(i)] = float(dot_row(e.gate, i, x, H)), u[size_t(i)] = float(dot_row(e.up, i, x, H));
  for (int64_t i = 0; i < I; ++i) g[size_t(i)] = g[size_t(i)] / (1.0f + std::exp(-g[size_t(i)])) * u[size_t(i)];
  std::vector<double> out(static_cast<size_t>(H));
  for (int64_t h = 0; h < H; ++h) out[size_t(h)] = dot_row(e.down, h, g.data(), I);
  return out;
}

std::vector<float> read_floats(simdjson::dom::element e) {
  std::vector<float> v;
  for (double x : e.get_array()) v.push_back(float(x));
  return v;
}

using test::relative_error;

ModelLoadOptions options_for(const std::string& name) {
  ModelLoadOptions o = test::exact_options();
  o.path = (kModels / name).string();
  o.threads = 2;
  o.context_length = 256;
  o.max_sequences = 2;
  return o;
}

std::string load_error(const ModelLoadOptions& o) {
  try {
    ModelInstance::load(o);
  } catch (const EngineError& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(moe)

BOOST_AUTO_TEST_CASE(routing_takes_the_top_softmax_probabilities) {
  // Two tokens over four experts.
  const float logits[] = {1.0f, 3.0f, 2.0f, 0.0f, /**/ 0.5f, 0.5f, -1.0f, 4.0f};
  Tensor l = Tensor::copy_of(DType::F32, {2, 4}, logits);
  ops::Routes r = ops::route_softmax_topk(l, 2, false);
  double z0 = std::exp(1.0) + std::exp(3.0) + std::exp(2.0) + 1.0;
  BOOST_TEST(r.k == 2);
  BOOST_TEST((r.expert == std::vector<int32_t>{1, 2, 0, 3}));  // ascending expert order; a tie goes to the lower index
  BOOST_TEST(r.weight[0] == std::exp(3.0) / z0, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(r.weight[1] == std::exp(2.0) / z0, boost::test_tools::tolerance(1e-6));
  ops::Routes n = ops::route_softmax_topk(l, 2, true);
  BOOST_TEST(n.weight[0] + n.weight[1] == 1.0f, boost::test_tools::tolerance(1e-6f));
  BOOST_TEST(n.weight[0] == std::exp(3.0) / (std::exp(3.0) + std::exp(2.0)), boost::test_tools::tolerance(1e-6));
  BOOST_CHECK_THROW(ops::route_softmax_topk(l, 5, false), EngineError);
}

// DeepSeek V3: groups ranked by their two best biased scores, experts chosen by biased score inside the
// chosen groups, weighted by their unbiased sigmoid scores.
BOOST_AUTO_TEST_CASE(sigmoid_routing_picks_within_the_best_groups) {
  // One token, six experts in three groups of two. Biased scores: group 0 = 0.9 + 0.1, group 1 =
  // 0.8 + 0.7, group 2 = 0.95 + 0.05 (its best expert alone would lead, but the pair sum ranks it last).
  const float s[] = {0.9f, 0.1f, 0.8f, 0.7f, 0.95f, 0.05f};
  float logits[6];
  for (int i = 0; i < 6; ++i) logits[i] = std::log(s[i] / (1 - s[i]));  // sigmoid(logit) = s
  const float zero[6] = {}, bias[6] = {0, 0, 0, 0, 0, 0.3f};
  Tensor l = Tensor::copy_of(DType::F32, {1, 6}, logits);
  ops::Routes r = ops::route_sigmoid_grouped(l, Tensor::copy_of(DType::F32, {6}, zero), 2, 3, 2, false, 1.0f);
  BOOST_TEST((r.expert == std::vector<int32_t>{0, 2}));  // groups 1 (1.5) and 0 (1.0); then 0.9 and 0.8
  BOOST_TEST(r.weight[0] == 0.9f, boost::test_tools::tolerance(1e-5f));
  // The bias lifts group 2 to 1.3 and expert 5's choice, but its weight stays its own score.
  r = ops::route_sigmoid_grouped(l, Tensor::copy_of(DType::F32, {6}, bias), 2, 3, 2, true, 2.5f);
  BOOST_TEST((r.expert == std::vector<int32_t>{2, 4}));  // groups 1 (1.5) and 2 (1.3); 0.95 and 0.8
  BOOST_TEST(r.weight[0] == 2.5f * 0.8f / (0.8f + 0.95f), boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(r.weight[1] == 2.5f * 0.95f / (0.8f + 0.95f), boost::test_tools::tolerance(1e-5f));
}

// The grouped expert op against each token run through its experts one by one (double sums over the
// same weights), for float and quantized experts, any thread count, grouped (NUMA-style) pools too.
BOOST_AUTO_TEST_CASE(expert_op_equals_each_token_through_its_experts) {
  std::mt19937 rng(5);
  const int64_t H = 64, I = 96, E = 6, T = 7, k = 2;
  for (DType t : {DType::F32, DType::I8, DType::I4G32}) {
    std::vector<ops::Expert> experts;
    for (int64_t e = 0; e < E; ++e) {
      ops::Expert& ex = experts.emplace_back();
      ex.gate = random_matrix(t, I, H, rng);
      ex.up = random_matrix(t, I, H, rng);
      ex.down = random_matrix(t, H, I, rng);
    }
    Tensor x = Tensor::zeros_f32({T, H}), logits = Tensor::zeros_f32({T, E});
    std::normal_distribution<float> normal(0.0f, 1.0f);
    for (int64_t i = 0; i < T * H; ++i) x.as<float>()[i] = normal(rng);
    for (int64_t i = 0; i < T * E; ++i) logits.as<float>()[i] = normal(rng);
    // Token 3 routed like token 0, so some expert gets several tokens.
    std::copy_n(logits.as<float>(), E, logits.as<float>() + 3 * E);
    const ops::Routes routes = ops::route_softmax_topk(logits, k, true);
    std::vector<std::vector<double>> want(static_cast<size_t>(T), std::vector<double>(static_cast<size_t>(H), 0.0));
    for (int64_t tok = 0; tok < T; ++tok)
      for (int64_t j = 0; j < k; ++j) {
        std::vector<double> y = expert_reference(experts[size_t(routes.expert[size_t(tok * k + j)])], x.as<float>() + tok * H, H);
        for (int64_t h = 0; h < H; ++h) want[size_t(tok)][size_t(h)] += routes.weight[size_t(tok * k + j)] * y[size_t(h)];
      }
    std::vector<float> first;
    // Variants: 1 thread, 2 threads, a grouped pool (fast kernels); the scalar reference kernels.
    for (int variant = 0; variant < 4; ++variant) {
      cpu::ThreadPool plain(variant == 0 ? 1 : 2), grouped(3, std::vector<int>{0, 0});
      const bool scalar = variant == 3;
      ops::Context ctx{variant == 2 ? grouped : plain, scalar ? cpu::kernels_named("scalar") : cpu::best_kernels()};
      Tensor out = Tensor::zeros_f32({T, H});
      ops::moe_experts(ctx, x, routes, experts, out);
      // Largest error relative to the largest output. Quantized experts also round the activations to
      // int8 (the fast kernels do), twice: allow for that.
      double worst = 0, scale = 0;
      for (int64_t tok = 0; tok < T; ++tok)
        for (int64_t h = 0; h < H; ++h) {
          worst = std::max(worst, test::difference(out.as<float>()[tok * H + h], want[size_t(tok)][size_t(h)]));
          scale = std::max(scale, std::fabs(want[size_t(tok)][size_t(h)]));
        }
      BOOST_TEST_MESSAGE(dtype_name(t) << " variant " << variant << ": max error / max output " << worst / scale);
      BOOST_TEST(worst / scale < (t == DType::F32 || scalar ? 1e-5 : 0.02), dtype_name(t) << ": " << worst / scale);
      std::vector<float> got(out.as<float>(), out.as<float>() + T * H);
      if (variant == 0) first = got;
      else if (!scalar) BOOST_TEST(got == first);  // the same bits whatever the threads and their grouping
    }
  }
}

// --moe_experts N computes what transformers computes with num_experts_per_tok = N.
BOOST_AUTO_TEST_CASE(moe_experts_matches_transformers_with_that_many_experts) {
  for (const char* name : {"qwen3-moe-f32", "qwen3-moe-bf16", "qwen2-moe-f32", "qwen2-moe-bf16", "deepseek-v3-f32", "deepseek-v3-bf16", "deepseek-v2-f32"}) {
    simdjson::dom::parser parser;
    simdjson::dom::element ref = parser.load((kModels / name / "reference.json").string());
    std::vector<int32_t> prompt;
    for (int64_t v : ref["prompt"].get_array()) prompt.push_back(int32_t(v));
    ModelLoadOptions o = options_for(name);
    o.moe_experts = int(int64_t(ref["moe_experts"]["k"]));
    auto m = ModelInstance::load(o);
    const auto logits = test::prompt_logits(*m, prompt, {int64_t(prompt.size()) - 1})[0];
    const double err = relative_error(logits, read_floats(ref["moe_experts"]["last_logits"]));
    BOOST_TEST(err < 1e-4, name << ": " << err);
    // And it did change the output: the default's logits are far from these.
    BOOST_TEST(relative_error(logits, read_floats(ref["last_logits"])) > 1e-2, name);
  }
}

// transformers 5 keeps experts fused in memory ([E, 2I, H] gate and up, [E, H, I] down); a checkpoint
// saved that way computes the same bits as the per-expert one.
BOOST_AUTO_TEST_CASE(fused_expert_checkpoint_equals_per_expert) {
  const fs::path src = kModels / "qwen3-moe-f32";
  const fs::path dir = fs::temp_directory_path() / ("ftllm-moe-fused-" + std::to_string(getpid()));
  fs::create_directories(dir);
  fs::copy_file(src / "config.json", dir / "config.json", fs::copy_options::overwrite_existing);
  auto stored = model::read_safetensors((src / "model.safetensors").string());
  std::vector<Tensor> owned;
  owned.reserve(stored.size() + 8);
  std::vector<std::pair<std::string, const Tensor*>> out;
  const int64_t E = 8, I = 64, H = 64;
  for (int layer : {0, 2}) {  // layer 1 is dense (mlp_only_layers)
    const std::string p = "model.layers." + std::to_string(layer) + ".mlp.experts.";
    Tensor gate_up = Tensor::zeros_f32({E, 2 * I, H}), down = Tensor::zeros_f32({E, H, I});
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + std::to_string(e) + ".";
      std::memcpy(gate_up.as<float>() + e * 2 * I * H, stored.at(x + "gate_proj.weight").data, size_t(I * H) * 4);
      std::memcpy(gate_up.as<float>() + (e * 2 + 1) * I * H, stored.at(x + "up_proj.weight").data, size_t(I * H) * 4);
      std::memcpy(down.as<float>() + e * H * I, stored.at(x + "down_proj.weight").data, size_t(H * I) * 4);
    }
    owned.push_back(std::move(gate_up));
    out.emplace_back(p + "gate_up_proj", &owned.back());
    owned.push_back(std::move(down));
    out.emplace_back(p + "down_proj", &owned.back());
  }
  for (auto& [name, t] : stored) {
    if (name.find(".mlp.experts.") != std::string::npos) continue;
    owned.push_back(Tensor{*t.dtype, t.shape, const_cast<void*>(t.data), t.owner, Device::cpu()});
    out.emplace_back(name, &owned.back());
  }
  model::write_safetensors((dir / "model.safetensors").string(), out);

  simdjson::dom::parser parser;
  std::vector<int32_t> prompt;
  for (int64_t v : parser.load((src / "reference.json").string())["prompt"].get_array()) prompt.push_back(int32_t(v));
  auto per_expert = ModelInstance::load(options_for("qwen3-moe-f32"));
  ModelLoadOptions fused_options = options_for("qwen3-moe-f32");
  fused_options.path = dir.string();
  auto fused = ModelInstance::load(fused_options);
  const int64_t last = int64_t(prompt.size()) - 1;
  BOOST_TEST(test::prompt_logits(*fused, prompt, {last})[0] == test::prompt_logits(*per_expert, prompt, {last})[0]);
  fs::remove_all(dir);
}

BOOST_AUTO_TEST_CASE(moe_dtype_converts_the_experts_only) {
  ModelLoadOptions o = options_for("qwen3-moe-f32");
  o.moe_dtype = "int8";
  auto m = ModelInstance::load(o);
  BOOST_TEST(m->dtypes() == "float32, int8");
  for (auto& [name, t] : m->model().named_tensors()) {
    const bool expert = name.find(".mlp.experts.") != std::string::npos;
    BOOST_TEST((t->dtype == DType::I8) == expert, name);
  }
  // --dtype converts the rest but leaves the routers (mlp.gate) alone, as llama-quantize does.
  o.moe_dtype = "auto";
  o.dtype = "int8";
  auto all = ModelInstance::load(o);
  for (auto& [name, t] : all->model().named_tensors())
    if (name.ends_with(".mlp.gate.weight")) BOOST_TEST((t->dtype == DType::F32), name);
}

BOOST_AUTO_TEST_CASE(moe_options_that_do_not_apply_are_refused_by_name) {
  ModelLoadOptions o = options_for("qwen3-moe-f32");
  o.moe_experts = 9;
  BOOST_TEST(load_error(o).find("--moe_experts 9 is outside 1..8") != std::string::npos, load_error(o));
  o = options_for("qwen3-f32");
  o.moe_experts = 2;
  BOOST_TEST(load_error(o).find("--moe_experts applies to mixture-of-experts models") != std::string::npos, load_error(o));
  o.moe_experts = 0;
  o.moe_device = "numa";
  BOOST_TEST(load_error(o).find("--moe_device numa applies to mixture-of-experts models") != std::string::npos, load_error(o));
  // Without a usable GPU the CUDA options say why they cannot apply (with one, cuda_model_test uses them).
  const bool gpu = load_error([] {
    ModelLoadOptions g = options_for("qwen3-f32");
    g.device = "cuda";
    return g;
  }()) == "no error";
  o = options_for("qwen3-moe-f32");
  o.cuda_se = true;
  if (!gpu) BOOST_TEST(load_error(o).find("--cuda_se") != std::string::npos, load_error(o));
  o = options_for("qwen3-moe-f32");
  o.moe_device = "cuda";
  if (!gpu) BOOST_TEST(load_error(o).find("--moe_device cuda is not available") != std::string::npos, load_error(o));
  o.moe_device = "gpu";
  BOOST_TEST(load_error(o).find("--moe_device gpu is unknown; use cpu, numa or cuda") != std::string::npos, load_error(o));
  // numa: on a machine of one node the experts run as cpu, and the load says so.
  o.moe_device = "numa";
  auto m = ModelInstance::load(o);
  if (cpu::numa_nodes_with_cpus().size() == 1)
    BOOST_TEST(m->load_notes() == "--moe_device numa: this machine has one NUMA node, so the experts run as --moe_device cpu");
}

BOOST_AUTO_TEST_SUITE_END()
