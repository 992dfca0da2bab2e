// Whole models on a GPU: fixture models give the same greedy tokens and logits on cpu and cuda, a layer
// split equals the all-GPU model, layers move between cpu and cuda while a stream runs, and MoE layers
// run with their experts on the host (fastllm's hybrid) or on the GPU. Skipped where no GPU is usable.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <tuple>
#include <vector>
#include <filesystem>

#include "../common/exact_options.h"
#include "../common/fixture_reference.h"
#include "../common/gpu.h"
#include "../common/greedy_run.h"
#include "../common/logit_error.h"
#include "core/error.h"
#include "runner/model_instance.h"
#include "../common/model_run.h"

namespace fs = std::filesystem;
using namespace ftllm;
using test::greedy;

namespace {

const fs::path kModels = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data" / "models";

std::unique_ptr<ModelInstance> load(const std::string& name, const std::string& device, const std::string& moe_device = "cpu",
                                    bool cuda_se = false, const std::string& prefix_cache = "on") {
  ModelLoadOptions o = test::exact_options();
  o.prefix_cache = prefix_cache;
  o.path = (kModels / name).string();
  o.threads = 2;
  o.context_length = 256;
  o.max_sequences = 4;
  o.device = device;
  o.moe_device = moe_device;
  o.cuda_se = cuda_se;
  return ModelInstance::load(o);
}

// Every float32 fixture: dense, MoE, and DeepSeek's latent attention.
const char* const kFixtures[] = {"llama-f32",     "llama-linear-tied-bias-f32", "llama3-rope-f32", "mistral-window-f32",
                                 "qwen2-f32",     "qwen3-f32",                  "qwen2-moe-f32",   "qwen3-moe-f32",
                                 "deepseek-v2-f32", "deepseek-v3-f32",          "deepseek-v3-yarn-f32", "gemma2-f32", "gemma3-f32", "phi3-f32", "glm4-moe-f32", "gpt-oss-f32", "qwen3-next-f32"};

}  // namespace

BOOST_AUTO_TEST_SUITE(cuda_models, *boost::unit_test::precondition(test::GpuPresent()))

BOOST_AUTO_TEST_CASE(fixtures_give_transformers_tokens_and_logits_on_the_gpu) {
  for (const char* name : kFixtures) {
    BOOST_TEST_CONTEXT(name) {
      const test::Reference ref = test::read_reference(kModels / name);
      auto gpu = load(name, "cuda");
      BOOST_TEST(gpu->placement().ranges().front().device.name() == "cuda:0");
      const int64_t last = int64_t(ref.prompt.size()) - 1;
      const double prefill = test::relative_error(test::prompt_logits(*gpu, ref.prompt, {last})[0], ref.last_logits);
      std::vector<int32_t> all = ref.prompt;
      all.insert(all.end(), ref.greedy.begin(), ref.greedy.end() - 1);
      const double decode = test::relative_error(test::decode_logits(*gpu, all, ref.prompt.size()), ref.final_logits);
      BOOST_TEST_MESSAGE(name << " on cuda: max |logit error| / range: prefill " << prefill << ", decode " << decode);
      BOOST_TEST(prefill < 1e-4);
      BOOST_TEST(decode < 1e-4);
      BOOST_TEST(greedy(*gpu, ref.prompt, int32_t(ref.greedy.size())) == ref.greedy, boost::test_tools::per_element());
    }
  }
}

// gpt-oss with MXFP4 experts (tests/data/quantized) all on the GPU: the matmuls decode the blocks in
// registers (block_decode.h) and match transformers reading the checkpoint.
BOOST_AUTO_TEST_CASE(mxfp4_experts_on_the_gpu_compute_what_transformers_computed) {
  const fs::path dir = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data" / "quantized" / "gpt-oss-mxfp4";
  const test::Reference ref = test::read_reference(dir);
  ModelLoadOptions o = test::exact_options();
  o.path = dir.string();
  o.threads = 2;
  o.context_length = 128;
  o.max_sequences = 1;
  o.device = "cuda";
  o.moe_device = "cuda";
  auto gpu = ModelInstance::load(o);
  BOOST_TEST(gpu->dtypes() == "float32, mxfp4");
  const int64_t last = int64_t(ref.prompt.size()) - 1;
  const double prefill = test::relative_error(test::prompt_logits(*gpu, ref.prompt, {last})[0], ref.last_logits);
  std::vector<int32_t> all = ref.prompt;
  all.insert(all.end(), ref.greedy.begin(), ref.greedy.end() - 1);
  const double decode = test::relative_error(test::decode_logits(*gpu, all, ref.prompt.size()), ref.final_logits);
  BOOST_TEST_MESSAGE("gpt-oss MXFP4 on cuda: prefill " << prefill << ", decode " << decode);
  BOOST_TEST(prefill < 1e-4);
  BOOST_TEST(decode < 1e-4);
  BOOST_TEST(greedy(*gpu, ref.prompt, int32_t(ref.greedy.size())) == ref.greedy, boost::test_tools::per_element());
}

// MoE GGUFs (stacked experts bound as views) on the GPU: Qwen3-MoE with its experts there too, DeepSeek V3
// with them in host memory (fastllm's hybrid), against transformers' logits of the source fixtures.
BOOST_AUTO_TEST_CASE(moe_ggufs_on_the_gpu_compute_what_transformers_computed) {
  const fs::path data = fs::path(FTLLM_SOURCE_ROOT) / "tests" / "data";
  for (auto [gguf, fixture, moe_device] : {std::tuple{"qwen3moe-f32.gguf", "qwen3-moe-f32", "cuda"},
                                           std::tuple{"deepseek-v3-f32.gguf", "deepseek-v3-f32", "cpu"}}) {
    BOOST_TEST_CONTEXT(gguf) {
      const test::Reference ref = test::read_reference(kModels / fixture);
      ModelLoadOptions o = test::exact_options();
      o.path = (data / "gguf" / gguf).string();
      o.threads = 2;
      o.context_length = 128;
      o.max_sequences = 1;
      o.device = "cuda";
      o.moe_device = moe_device;
      auto gpu = ModelInstance::load(o);
      const int64_t last = int64_t(ref.prompt.size()) - 1;
      const std::vector<float> logits = test::prompt_logits(*gpu, ref.prompt, {last})[0];
      const double err = test::relative_error(logits, ref.last_logits);
      BOOST_TEST_MESSAGE(gguf << " on cuda, experts on " << moe_device << ": " << err);
      BOOST_TEST(err < 1e-4);
      // Split between the GPU and the host by layers, and with the shared experts kept on the GPU (--cuda_se).
      o.device = "{'cuda:0':1,'cpu':1}";
      BOOST_TEST(test::relative_error(test::prompt_logits(*ModelInstance::load(o), ref.prompt, {last})[0], logits) < 1e-5);
      o.device = "cuda";
      o.moe_device = "cpu";
      o.cuda_se = true;
      BOOST_TEST(test::relative_error(test::prompt_logits(*ModelInstance::load(o), ref.prompt, {last})[0], ref.last_logits) < 1e-4);
    }
  }
}

BOOST_AUTO_TEST_CASE(a_layer_split_equals_the_all_gpu_model) {
  for (const char* name : {"qwen3-f32", "llama-linear-tied-bias-f32", "qwen3-moe-f32"}) {
    BOOST_TEST_CONTEXT(name) {
      const test::Reference ref = test::read_reference(kModels / name);
      auto gpu = load(name, "cuda");
      auto split = load(name, "{'cuda:0':1,'cpu':1}");
      auto other_way = load(name, "{'cpu':1,'cuda:0':1}");
      BOOST_TEST(split->placement().to_string().find("cpu") != std::string::npos);
      // Both devices hold weights and KV pages, adding up to the model's.
      const auto memory = split->memory_by_device();
      BOOST_REQUIRE_EQUAL(memory.size(), 2u);
      BOOST_TEST(memory[1].device == "cuda:0");
      BOOST_TEST(memory[0].weight_bytes > 0u);
      BOOST_TEST(memory[1].weight_bytes > 0u);
      BOOST_TEST(memory[0].weight_bytes + memory[1].weight_bytes == split->model().weight_bytes());
      BOOST_TEST(memory[0].kv_bytes + memory[1].kv_bytes == split->kv_bytes());
      const int64_t last = int64_t(ref.prompt.size()) - 1;
      const std::vector<float> all_gpu = test::prompt_logits(*gpu, ref.prompt, {last})[0];
      BOOST_TEST(test::relative_error(test::prompt_logits(*split, ref.prompt, {last})[0], all_gpu) < 1e-5);
      BOOST_TEST(test::relative_error(test::prompt_logits(*other_way, ref.prompt, {last})[0], all_gpu) < 1e-5);
      BOOST_TEST(greedy(*split, ref.prompt, 24) == greedy(*gpu, ref.prompt, 24), boost::test_tools::per_element());
    }
  }
}

// Layers move cpu -> split -> cuda -> cpu between steps of one running generation; it gives the tokens
// it gives unmoved, because each layer's KV pages move with it.
// Qwen3-Next's linear-attention layers carry their recurrent states the same way; a MoE GGUF's stacked
// experts move as views of the mapped file do.
BOOST_AUTO_TEST_CASE(rebalance_between_cpu_and_cuda_during_a_stream) {
  for (auto [name, reference] : {std::pair{"qwen3-f32", "qwen3-f32"}, {"qwen3-next-f32", "qwen3-next-f32"},
                                 {"../gguf/qwen3moe-f32.gguf", "qwen3-moe-f32"}}) {
    BOOST_TEST_CONTEXT(name) {
      const test::Reference ref = test::read_reference(kModels / reference);
      auto m = load(name, "cpu");
      const std::vector<int32_t> want = greedy(*m, ref.prompt, 48);
      const std::vector<std::string> moves = {"{'cuda:0':1,'cpu':1}", "cuda", "{'cpu':3,'cuda':1}", "cpu"};
      size_t applied = 0;
      const std::vector<int32_t> got = test::greedy_while_moving(*m, ref.prompt, 48, moves, &applied);
      BOOST_TEST(applied == moves.size());
      BOOST_TEST(m->placement().to_string() == "cpu:0-" + std::to_string(m->config().num_layers - 1));
      BOOST_TEST(got == want, boost::test_tools::per_element());
    }
  }
}

// The prefix cache on the GPU: a second request sharing the first's prefix reads its pages after they
// moved with their layers to another GPU (on a one-GPU machine: to the host and back), and gets the
// tokens and log-probabilities, to the bit, of a model that kept them where they were. (Not those of a
// model without the cache: that one computes the prompt's last tokens in a larger batch, and cuBLAS picks
// its kernels, and so its sums' order, by shape: an H200 differed in the seventh digit, and the simulator's
// GEMM, which splits its sums by shape too, alike.) Dense, MoE and latent attention.
BOOST_AUTO_TEST_CASE(prefix_cache_pages_on_the_gpu_stay_exact_across_a_rebalance) {
  for (const char* name : {"qwen3-f32", "qwen2-moe-f32", "deepseek-v2-f32"}) {
    BOOST_TEST_CONTEXT(name) {
      auto cached = load(name, "cuda:0", "cpu", false, "on"), stayed = load(name, "cuda:0", "cpu", false, "on");
      const test::Reference ref = test::read_reference(kModels / name);
      std::vector<int32_t> prefix;
      while (prefix.size() < 40) prefix.insert(prefix.end(), ref.prompt.begin(), ref.prompt.end());
      prefix.resize(40);
      auto request = [&](int32_t extra) {
        GenerationRequest r;
        r.prompt = prefix;
        r.prompt.push_back(extra);
        r.sampling.temperature = 0.9f;
        r.sampling.seed = uint64_t(extra);
        r.max_tokens = 10;
        r.ignore_eos = true;
        r.logprobs = 2;
        return r;
      };
      auto same = [](const test::Traced& a, const test::Traced& b) {
        BOOST_TEST(a.result.tokens == b.result.tokens, boost::test_tools::per_element());
        BOOST_REQUIRE_EQUAL(a.logprobs.size(), b.logprobs.size());
        for (size_t i = 0; i < a.logprobs.size(); ++i) {
          BOOST_TEST(a.logprobs[i].logprob == b.logprobs[i].logprob);
          BOOST_TEST((a.logprobs[i].top == b.logprobs[i].top));
        }
      };
      same(test::generate_traced(*cached, {request(1)})[0], test::generate_traced(*stayed, {request(1)})[0]);
      // To the second GPU; on a machine with one, to the host and back (the pages cross devices twice).
      for (const char* to : cuda::device_count() >= 2 ? std::vector<const char*>{"cuda:1"} : std::vector<const char*>{"cpu", "cuda:0"}) {
        const Placement placement = Placement::parse(to, cached->config().num_layers);
        const std::string want = placement.to_string();
        cached->runner().set_placement(placement);
        for (int i = 0; i < 500 && cached->placement().to_string() != want; ++i) usleep(10000);
        BOOST_REQUIRE_EQUAL(cached->placement().to_string(), want);
      }
      BOOST_TEST(cached->runner().load().kv_blocks_cached > 0);
      const test::Traced second = test::generate_traced(*cached, {request(2)})[0];
      BOOST_TEST(second.result.cached_tokens == 32);
      const test::Traced unmoved = test::generate_traced(*stayed, {request(2)})[0];
      BOOST_TEST(unmoved.result.cached_tokens == 32);
      same(second, unmoved);
    }
  }
}

// fastllm's hybrid: the dense part on the GPU, the routed experts in host memory (--moe_device cpu), or
// the experts on the GPU too; shared experts on the GPU with --cuda_se. All equal the cpu model.
BOOST_AUTO_TEST_CASE(moe_experts_on_the_host_or_the_gpu_equal_all_cpu) {
  for (const char* name : {"qwen3-moe-f32", "qwen2-moe-f32"}) {
    BOOST_TEST_CONTEXT(name) {
      const test::Reference ref = test::read_reference(kModels / name);
      const int64_t last = int64_t(ref.prompt.size()) - 1;
      const std::vector<float> cpu = test::prompt_logits(*load(name, "cpu"), ref.prompt, {last})[0];
      for (auto [moe_device, cuda_se] : {std::pair{"cpu", false}, std::pair{"cpu", true}, std::pair{"cuda", false}}) {
        auto m = load(name, "cuda", moe_device, cuda_se);
        BOOST_TEST(test::relative_error(test::prompt_logits(*m, ref.prompt, {last})[0], cpu) < 1e-5,
                   "--moe_device " << moe_device << (cuda_se ? " --cuda_se" : ""));
        BOOST_TEST(greedy(*m, ref.prompt, int32_t(ref.greedy.size())) == ref.greedy, boost::test_tools::per_element());
      }
    }
  }
}

// Tensor parallelism with GPU shards: two on one GPU (what a one-GPU machine can check), and a GPU with
// the CPU (fastllm's multicuda:0,cpu); both give transformers' tokens.
BOOST_AUTO_TEST_CASE(tensor_parallel_shards_on_the_gpu_equal_the_whole_layer) {
  for (const char* name : {"qwen3-f32", "llama-linear-tied-bias-f32", "qwen3-moe-f32"})
    for (const char* device : {"multicuda:0,0", "multicuda:0:3,cpu:1"}) {
      BOOST_TEST_CONTEXT(name << " on " << device) {
        const test::Reference ref = test::read_reference(kModels / name);
        auto m = load(name, device);
        BOOST_TEST(m->placement().to_string().starts_with("multi:cuda:0="));
        const int64_t last = int64_t(ref.prompt.size()) - 1;
        BOOST_TEST(test::relative_error(test::prompt_logits(*m, ref.prompt, {last})[0], ref.last_logits) < 1e-4);
        BOOST_TEST(greedy(*m, ref.prompt, int32_t(ref.greedy.size())) == ref.greedy, boost::test_tools::per_element());
      }
    }
}

// Over two GPUs the shards' partial sums meet through NCCL's all-reduce (where NCCL is installed).
BOOST_AUTO_TEST_CASE(tensor_parallel_over_two_gpus_equals_the_whole_layer) {
  if (cuda::device_count() < 2) {
    BOOST_TEST_MESSAGE("one GPU: the NCCL path needs two");
    return;
  }
  const test::Reference ref = test::read_reference(kModels / "qwen3-f32");
  auto m = load("qwen3-f32", "multicuda:0,1");
  BOOST_TEST(m->placement().to_string().starts_with("multi:cuda:0=1,cuda:1=1"));
  const int64_t last = int64_t(ref.prompt.size()) - 1;
  BOOST_TEST(test::relative_error(test::prompt_logits(*m, ref.prompt, {last})[0], ref.last_logits) < 1e-4);
  BOOST_TEST(greedy(*m, ref.prompt, int32_t(ref.greedy.size())) == ref.greedy, boost::test_tools::per_element());
}

// --gpu_memory: a load that cannot fit says what to change; one whose KV cache does not fit at its
// sequences shrinks the cache to whole sequences that do, and says so.
BOOST_AUTO_TEST_CASE(gpu_memory_bounds_the_weights_and_sizes_the_kv_cache) {
  ModelLoadOptions o = test::exact_options();
  o.path = (kModels / "qwen3-f32").string();
  o.threads = 2;
  o.device = "cuda";
  o.context_length = 4096;
  o.max_sequences = 64;
  o.gpu_memory = 1e-12;
  try {
    ModelInstance::load(o);
    BOOST_FAIL("a load past --gpu_memory succeeded");
  } catch (const EngineError& e) {
    BOOST_TEST(std::string(e.what()).find("raise --gpu_memory") != std::string::npos, e.what());
  }
  // The KV cache of 64 sequences on the host, then a budget of about half of it.
  o.device = "cpu";
  const uint64_t kv = ModelInstance::load(o)->kv_bytes();
  const cuda::MemoryUse m = cuda::memory_use(test::kGpu);
  o.device = "cuda";
  o.gpu_memory = double(kv / 2) / double(m.free + m.cached);
  auto half = ModelInstance::load(o);
  BOOST_TEST(half->load_notes().find("the KV cache holds") != std::string::npos, half->load_notes());
  BOOST_TEST(half->kv_bytes() < kv);
  BOOST_TEST(half->kv_bytes() > kv / 4);
  const test::Reference ref = test::read_reference(kModels / "qwen3-f32");
  BOOST_TEST(greedy(*half, ref.prompt, int32_t(ref.greedy.size())) == ref.greedy, boost::test_tools::per_element());
}

// DeepSeek's hybrid: latent attention on the GPU, experts on the host; and the reverse.
BOOST_AUTO_TEST_CASE(deepseek_with_its_experts_apart_equals_all_cpu) {
  for (const char* name : {"deepseek-v3-f32", "deepseek-v2-f32"}) {
    BOOST_TEST_CONTEXT(name) {
      const test::Reference ref = test::read_reference(kModels / name);
      const int64_t last = int64_t(ref.prompt.size()) - 1;
      const std::vector<float> cpu = test::prompt_logits(*load(name, "cpu"), ref.prompt, {last})[0];
      for (auto [device, moe_device] : {std::pair{"cuda", "cpu"}, std::pair{"cpu", "cuda"}}) {
        auto m = load(name, device, moe_device, true);
        BOOST_TEST(test::relative_error(test::prompt_logits(*m, ref.prompt, {last})[0], cpu) < 1e-5, device << " / " << moe_device);
        BOOST_TEST(greedy(*m, ref.prompt, int32_t(ref.greedy.size())) == ref.greedy, boost::test_tools::per_element());
      }
    }
  }
}

// LoRA adapters on GPU layers (and on a model split between the GPU and the host): PEFT's logits and tokens,
// and a batch mixing the base and two adapters equals each alone bit for bit on the device too.
BOOST_AUTO_TEST_CASE(lora_adapters_run_on_the_gpu) {
  const fs::path lora = kModels.parent_path() / "lora";
  for (const char* device : {"cuda", "{'cuda:0':2,'cpu':1}"}) {
    BOOST_TEST_CONTEXT(device) {
      auto m = load("llama-f32", device);
      auto a = m->load_adapter((lora / "llama-all-r8").string(), "a");
      auto b = m->load_adapter((lora / "llama-qv-r4-rslora").string(), "b");
      const test::Reference ref = test::read_reference(lora / "llama-all-r8");
      const int64_t last = int64_t(ref.prompt.size()) - 1;
      BOOST_TEST(test::relative_error(test::prompt_logits(*m, ref.prompt, {last}, a.get())[0], ref.last_logits) < 1e-4);
      const test::Reference ref_b = test::read_reference(lora / "llama-qv-r4-rslora");  // a float16 adapter
      BOOST_TEST(test::relative_error(test::prompt_logits(*m, ref_b.prompt, {last}, b.get())[0], ref_b.last_logits) < 1e-4);
      GenerationRequest r = test::greedy_request(ref.prompt, int32_t(ref.greedy.size()));
      r.adapter = a;
      BOOST_TEST(test::generate(*m, {r})[0].tokens == ref.greedy, boost::test_tools::per_element());
      std::vector<GenerationRequest> mixed(3, r);
      mixed[0].adapter = nullptr;
      mixed[2].adapter = b;
      const auto together = test::generate(*m, mixed);
      for (size_t i = 0; i < mixed.size(); ++i) BOOST_TEST(together[i].tokens == test::generate(*m, {mixed[i]})[0].tokens);
      BOOST_TEST(together[0].tokens != together[1].tokens);
    }
  }
  // Splitting layers over devices would leave adapters without whole layers: refused while they are loaded.
  Engine engine;
  ModelLoadOptions o = test::exact_options();
  o.path = (kModels / "llama-f32").string();
  o.name = "base";
  o.device = "cuda";
  BOOST_REQUIRE(engine.load(o).ok);
  BOOST_REQUIRE(engine.load_adapter("base", (lora / "llama-all-r8").string(), "a").ok);
  BOOST_TEST(engine.model("base")->set_placement("multicuda:0,0").message.find("unload them") != std::string::npos);
  BOOST_REQUIRE(engine.unload_adapter("a").ok);
  BOOST_TEST(engine.model("base")->set_placement("multicuda:0,0").ok);
}

BOOST_AUTO_TEST_SUITE_END()
