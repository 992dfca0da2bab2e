// ftllm-bench: prefill and decode speed and memory of one model on the CPU. A program, not a test.
//
//   ftllm-bench MODEL [-t THREADS] [--prompt N] [--slice N] [--decode N] [--repeat R] [--batch B] [--dtype D] [--kernels K]
//               [--device cpu|cuda|{'cuda:0':3,'cpu':1}] [--moe_device cpu|cuda] [--bandwidth GBPS]
//               [--kv_dtype f16|bf16|f32|q8_0|fp8] [--context N]
//               [--adapters N [--lora_rank R] [--lora_targets q_proj,v_proj|all] [--lora_dtype bf16|f32]]
//
// Decode moves every weight byte once per step, so its ceiling is (read bandwidth) / (weight bytes): the
// bandwidth is measured here, a STREAM-like sum over 1 GiB on the same threads, and each decode row
// reports the fraction of that roofline it reached.
//   ftllm-bench --make-random DIR [--shape qwen2.5-0.5b|smollm2-135m|qwen3-0.6b|qwen3-8b|qwen3-30b-a3b|gemma-3-1b|
//                                  phi-4-mini|gpt-oss-20b|qwen3-next-80b-a3b-16l]
//               [--dtype bf16|f16|f32|int8|int4gN]
//
// The prompt is fed as the daemon feeds one, in forward passes of --slice tokens (512, the scheduler's
// max_batch_tokens; llama-bench's n_ubatch is 512 as well), each attending to the ones before through
// the KV cache.
//
// --context N adds rows for decode at a long context and at 512 tokens: a sequence of each prefilled
// (in 2048-token slices, not timed), then --decode single-token steps of the two, in turns of eight, timed
// through the forward pass (attention reads N keys a step), and the ratio of their times a token. Their
// roofline counts the KV cache a step reads (a long context's cache can outweigh the weights), and the
// ratio of the two steps' bytes is the least the ratio of their times can be where bandwidth sets the pace.
//
// --adapters N writes N random LoRA adapters of rank R (PEFT's layout, in a temporary directory), loads
// them, and adds a decode row where row i of the batch uses adapter i % N, measured alternately with the
// plain batch (base-model rows) in each repeat.
//
// MODEL is a Hugging Face directory or a .gguf file. --make-random writes a random-weight model of a real
// shape, so speed can be measured without downloading weights.
#include <immintrin.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "cpu/kernels.h"
#include "model/lora.h"
#include "model/safetensors.h"
#include "runner/model_instance.h"
#include "scheduler/scheduler.h"
#include "../common/model_run.h"

using namespace ftllm;
namespace fs = std::filesystem;

namespace {

constexpr int64_t kShortContext = 512;  // what --context compares a long context with

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

size_t rss_bytes() {
  std::ifstream in("/proc/self/status");
  std::string key;
  size_t kib = 0;
  while (in >> key) {
    if (key == "VmRSS:") {
      in >> kib;
      return kib * 1024;
    }
    in.ignore(1 << 20, '\n');
  }
  return 0;
}

__attribute__((target("avx2"))) float sum_floats(const float* p, size_t n) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
  for (size_t i = 0; i + 32 <= n; i += 32)
    for (int k = 0; k < 4; ++k) acc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(p + i + 8 * k));
  float out[8];
  _mm256_storeu_ps(out, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));
  return out[0] + out[7];
}

// GB/s of summing a buffer far larger than the caches, split over `threads` threads; the median of 5.
double read_bandwidth(int threads) {
  const size_t n = (size_t(1) << 30) / sizeof(float);
  std::vector<float> buf(n, 1.0f);  // written once, so the pages are real
  std::vector<double> runs;
  for (int r = 0; r < 5; ++r) {
    std::vector<std::thread> pool;
    std::vector<float> sums(size_t(threads) * 16);
    double a = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    for (int t = 0; t < threads; ++t)
      pool.emplace_back([&, t] {  // the sum is stored so the loop stays
        sums[size_t(t) * 16] = sum_floats(buf.data() + n / size_t(threads) * size_t(t), n / size_t(threads));
      });
    for (auto& th : pool) th.join();
    double b = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    runs.push_back(double(n * sizeof(float)) / (b - a) / 1e9);
  }
  std::sort(runs.begin(), runs.end());
  return runs[runs.size() / 2];
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

struct Shape {
  const char* arch;
  int64_t hidden, intermediate, layers, heads, kv_heads, head_dim, vocab;  // head_dim 0: hidden / heads
  bool tied, qkv_bias, qk_norm;
  int64_t experts = 0, experts_per_token = 0, expert_intermediate = 0;  // mixture of experts
  std::string family = "";  // what else the architecture binds and reads: "gemma3", "phi3", "gpt-oss"
};
const std::map<std::string, Shape> kShapes = {
    {"qwen2.5-0.5b", {"Qwen2ForCausalLM", 896, 4864, 24, 14, 2, 0, 151936, true, true, false}},
    {"smollm2-135m", {"LlamaForCausalLM", 576, 1536, 30, 9, 3, 0, 49152, true, false, false}},
    {"qwen3-0.6b", {"Qwen3ForCausalLM", 1024, 3072, 28, 16, 8, 128, 151936, true, false, true}},
    {"qwen3-8b", {"Qwen3ForCausalLM", 4096, 12288, 36, 32, 8, 128, 151936, false, false, true}},
    {"qwen3-30b-a3b", {"Qwen3MoeForCausalLM", 2048, 6144, 48, 32, 4, 128, 151936, false, false, true, 128, 8, 768}},
    {"gemma-3-1b", {"Gemma3ForCausalLM", 1152, 6912, 26, 4, 1, 256, 262144, true, false, true, 0, 0, 0, "gemma3"}},
    {"phi-4-mini", {"Phi3ForCausalLM", 3072, 8192, 32, 24, 8, 128, 200064, true, false, false, 0, 0, 0, "phi3"}},
    {"gpt-oss-20b", {"GptOssForCausalLM", 2880, 2880, 24, 64, 8, 64, 201088, false, true, false, 32, 4, 2880, "gpt-oss"}},
    // Qwen3-Next-80B-A3B's layer shape over 16 of its 48 layers (all of them need 48 GB in int4g32): gated
    // DeltaNet with 16 key / 32 value heads of 128, every fourth layer full attention, 512 experts (10 per
    // token) and a shared one of 512.
    {"qwen3-next-80b-a3b-16l", {"Qwen3NextForCausalLM", 2048, 5120, 16, 16, 2, 256, 151936, false, false, true, 512, 10, 512, "qwen3-next"}},
};

// A quick generator for bulk bytes (30 billion weights would take minutes through std::normal_distribution).
struct SplitMix {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// Random weights of a real shape, written as safetensors one tensor at a time (a 30B model never sits in
// memory): float types as normal(0, 0.02) values, block types (int4gN, int8) as random quantized values
// under a scale that spans about +-0.04, in ftllm's format (U8 rows, dtype in the metadata). Norms are 1
// and MoE routers float32.
int make_random(const std::string& dir, const std::string& shape_name, const std::string& dtype_text) {
  auto it = kShapes.find(shape_name);
  if (it == kShapes.end()) return std::fprintf(stderr, "unknown shape %s\n", shape_name.c_str()), 2;
  const Shape& s = it->second;
  const std::optional<DType> parsed = parse_dtype(dtype_text);
  if (!parsed || !(is_float(*parsed) || *parsed == DType::I8 || *parsed == DType::I4G32 || *parsed == DType::I4G64 ||
                   *parsed == DType::I4G128 || *parsed == DType::I4G256))
    return std::fprintf(stderr, "--make-random writes f32, f16, bf16, int8 or int4gN, not %s\n", dtype_text.c_str()), 2;
  const DType dt = *parsed;
  fs::create_directories(dir);
  const int64_t d = s.head_dim ? s.head_dim : s.hidden / s.heads, q = s.heads * d, kv = s.kv_heads * d;
  struct Entry {
    std::string name;
    std::vector<int64_t> shape;
    DType dtype;
  };
  std::vector<Entry> tensors = {{"model.embed_tokens.weight", {s.vocab, s.hidden}, dt}, {"model.norm.weight", {s.hidden}, DType::F32}};
  if (!s.tied) tensors.push_back({"lm_head.weight", {s.vocab, s.hidden}, dt});
  for (int64_t l = 0; l < s.layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const bool next = s.family == "qwen3-next", linear = next && (l + 1) % 4 != 0;
    if (linear) {  // the DeltaNet's projections (16 key heads, 32 value heads of 128; conv of 4)
      const int64_t keys = 16 * 128, values = 32 * 128;
      tensors.push_back({p + "linear_attn.in_proj_qkvz.weight", {2 * keys + 2 * values, s.hidden}, dt});
      tensors.push_back({p + "linear_attn.in_proj_ba.weight", {64, s.hidden}, DType::F32});
      tensors.push_back({p + "linear_attn.conv1d.weight", {2 * keys + values, 4}, DType::F32});  // as a GGUF squeezes it
      tensors.push_back({p + "linear_attn.dt_bias", {32}, DType::F32});
      tensors.push_back({p + "linear_attn.A_log", {32}, DType::F32});
      tensors.push_back({p + "linear_attn.norm.weight", {128}, DType::F32});
      tensors.push_back({p + "linear_attn.out_proj.weight", {s.hidden, values}, dt});
    } else {
      for (auto& [n, shape] : std::vector<std::pair<std::string, std::vector<int64_t>>>{
               {"self_attn.q_proj.weight", {next ? 2 * q : q, s.hidden}}, {"self_attn.k_proj.weight", {kv, s.hidden}},
               {"self_attn.v_proj.weight", {kv, s.hidden}}, {"self_attn.o_proj.weight", {s.hidden, q}}})
        tensors.push_back({p + n, shape, dt});
    }
    tensors.push_back({p + "input_layernorm.weight", {s.hidden}, DType::F32});
    tensors.push_back({p + "post_attention_layernorm.weight", {s.hidden}, DType::F32});
    if (s.qk_norm && !linear) {
      tensors.push_back({p + "self_attn.q_norm.weight", {d}, DType::F32});
      tensors.push_back({p + "self_attn.k_norm.weight", {d}, DType::F32});
    }
    if (s.qkv_bias)
      for (auto [n, len] : {std::pair{"q_proj", q}, {"k_proj", kv}, {"v_proj", kv}})
        tensors.push_back({p + "self_attn." + n + ".bias", {len}, DType::F32});
    if (s.family == "gemma3")
      for (const char* n : {"pre_feedforward_layernorm.weight", "post_feedforward_layernorm.weight"})
        tensors.push_back({p + n, {s.hidden}, DType::F32});
    if (s.family == "gpt-oss") {
      tensors.push_back({p + "self_attn.o_proj.bias", {s.hidden}, DType::F32});
      tensors.push_back({p + "self_attn.sinks", {s.heads}, DType::F32});
      tensors.push_back({p + "mlp.router.weight", {s.experts, s.hidden}, DType::F32});
      tensors.push_back({p + "mlp.router.bias", {s.experts}, DType::F32});
      for (int64_t e = 0; e < s.experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        tensors.push_back({x + "gate_proj.weight", {s.expert_intermediate, s.hidden}, dt});
        tensors.push_back({x + "up_proj.weight", {s.expert_intermediate, s.hidden}, dt});
        tensors.push_back({x + "down_proj.weight", {s.hidden, s.expert_intermediate}, dt});
        tensors.push_back({x + "gate_proj.bias", {s.expert_intermediate}, DType::F32});
        tensors.push_back({x + "up_proj.bias", {s.expert_intermediate}, DType::F32});
        tensors.push_back({x + "down_proj.bias", {s.hidden}, DType::F32});
      }
    } else if (s.experts) {
      tensors.push_back({p + "mlp.gate.weight", {s.experts, s.hidden}, DType::F32});
      if (next) {
        tensors.push_back({p + "mlp.shared_expert_gate.weight", {1, s.hidden}, DType::F32});
        tensors.push_back({p + "mlp.shared_expert.gate_proj.weight", {s.expert_intermediate, s.hidden}, dt});
        tensors.push_back({p + "mlp.shared_expert.up_proj.weight", {s.expert_intermediate, s.hidden}, dt});
        tensors.push_back({p + "mlp.shared_expert.down_proj.weight", {s.hidden, s.expert_intermediate}, dt});
      }
      for (int64_t e = 0; e < s.experts; ++e) {
        const std::string x = p + "mlp.experts." + std::to_string(e) + ".";
        tensors.push_back({x + "gate_proj.weight", {s.expert_intermediate, s.hidden}, dt});
        tensors.push_back({x + "up_proj.weight", {s.expert_intermediate, s.hidden}, dt});
        tensors.push_back({x + "down_proj.weight", {s.hidden, s.expert_intermediate}, dt});
      }
    } else {
      tensors.push_back({p + "mlp.gate_proj.weight", {s.intermediate, s.hidden}, dt});
      tensors.push_back({p + "mlp.up_proj.weight", {s.intermediate, s.hidden}, dt});
      tensors.push_back({p + "mlp.down_proj.weight", {s.hidden, s.intermediate}, dt});
    }
  }
  auto st_name = [](DType t) { return t == DType::F32 ? "F32" : t == DType::F16 ? "F16" : t == DType::BF16 ? "BF16" : "U8"; };
  std::string header = "{\"__metadata__\":{\"format\":\"ftllm\"", meta;
  std::string entries;
  uint64_t offset = 0;
  for (const Entry& t : tensors) {
    const int64_t cols = t.shape.back(), rows = t.shape.size() == 2 ? t.shape[0] : 1;
    const uint64_t bytes = uint64_t(rows) * row_bytes(t.dtype, cols);
    std::string dims = is_float(t.dtype) ? "" : std::to_string(rows) + "," + std::to_string(row_bytes(t.dtype, cols));
    if (is_float(t.dtype))
      for (int64_t x : t.shape) dims += (dims.empty() ? "" : ",") + std::to_string(x);
    else
      header += ",\"" + t.name + "\":\"" + std::string(dtype_name(t.dtype)) + "\"";
    entries += ",\"" + t.name + "\":{\"dtype\":\"" + st_name(t.dtype) + "\",\"shape\":[" + dims + "],\"data_offsets\":[" +
               std::to_string(offset) + "," + std::to_string(offset + bytes) + "]}";
    offset += bytes;
  }
  header += "}" + entries + "}";
  while (header.size() % 8) header += ' ';
  std::ofstream out(fs::path(dir) / "model.safetensors", std::ios::binary);
  uint64_t len = header.size();
  out.write(reinterpret_cast<const char*>(&len), 8);
  out << header;
  std::mt19937 rng(1);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  SplitMix bits{1};
  std::vector<char> buf;
  for (const Entry& t : tensors) {
    const int64_t cols = t.shape.back(), rows = t.shape.size() == 2 ? t.shape[0] : 1;
    buf.resize(size_t(rows) * row_bytes(t.dtype, cols));
    const bool norm = t.name.find("norm") != std::string::npos;
    if (is_float(t.dtype)) {
      for (int64_t i = 0; i < rows * cols; ++i) {
        const float v = norm ? 1.0f : normal(rng);
        if (t.dtype == DType::F32) std::memcpy(buf.data() + i * 4, &v, 4);
        else {
          const uint16_t h = t.dtype == DType::F16 ? f32_to_f16(v) : f32_to_bf16(v);
          std::memcpy(buf.data() + i * 2, &h, 2);
        }
      }
    } else {
      for (size_t i = 0; i + 8 <= buf.size(); i += 8) {
        const uint64_t r = bits.next();
        std::memcpy(buf.data() + i, &r, 8);
      }
      // Valid headers: int8 rows start with a float32 scale; int4gN groups with float16 scale and minimum.
      const size_t row = row_bytes(t.dtype, cols);
      for (int64_t r = 0; r < rows; ++r) {
        char* p = buf.data() + size_t(r) * row;
        if (t.dtype == DType::I8) {
          const float scale = 0.04f / 127;
          std::memcpy(p, &scale, 4);
        } else {
          const DTypeLayout g = dtype_layout(t.dtype);
          for (int64_t b = 0; b < cols / g.block_values; ++b) {
            const uint16_t h[2] = {f32_to_f16(0.08f / 15), f32_to_f16(-0.04f)};
            std::memcpy(p + size_t(b) * g.block_bytes, h, 4);
          }
        }
      }
    }
    out.write(buf.data(), std::streamsize(buf.size()));
  }
  std::ofstream cfg(fs::path(dir) / "config.json");
  cfg << "{\"architectures\":[\"" << s.arch << "\"],\"hidden_size\":" << s.hidden << ",\"intermediate_size\":" << s.intermediate
      << ",\"num_hidden_layers\":" << s.layers << ",\"num_attention_heads\":" << s.heads
      << ",\"num_key_value_heads\":" << s.kv_heads << ",\"head_dim\":" << d << ",\"vocab_size\":" << s.vocab
      << ",\"max_position_embeddings\":4096,\"rms_norm_eps\":1e-6,\"rope_theta\":1000000.0,\"tie_word_embeddings\":"
      << (s.tied ? "true" : "false");
  if (s.family == "gemma3")
    cfg << ",\"query_pre_attn_scalar\":256,\"sliding_window\":512,\"sliding_window_pattern\":6,\"rope_local_base_freq\":10000.0"
        << ",\"hidden_activation\":\"gelu_pytorch_tanh\"";
  if (s.family == "phi3") cfg << ",\"partial_rotary_factor\":0.75";
  if (s.family == "gpt-oss")
    cfg << ",\"num_local_experts\":" << s.experts << ",\"num_experts_per_tok\":" << s.experts_per_token
        << ",\"sliding_window\":128,\"attention_bias\":true";
  else if (s.experts)
    cfg << ",\"num_experts\":" << s.experts << ",\"num_experts_per_tok\":" << s.experts_per_token
        << ",\"moe_intermediate_size\":" << s.expert_intermediate << ",\"norm_topk_prob\":true";
  if (s.family == "qwen3-next")
    cfg << ",\"shared_expert_intermediate_size\":" << s.expert_intermediate << ",\"full_attention_interval\":4"
        << ",\"linear_num_key_heads\":16,\"linear_num_value_heads\":32,\"linear_key_head_dim\":128"
        << ",\"linear_value_head_dim\":128,\"linear_conv_kernel_dim\":4,\"partial_rotary_factor\":0.25";
  cfg << "}\n";
  std::printf("wrote %s: %s shape, %s, %.1f MB\n", dir.c_str(), shape_name.c_str(), std::string(dtype_name(dt)).c_str(),
              double(offset) / 1e6);
  return 0;
}

// Tokens per second of `steps` single-token forward passes after `context` tokens of one sequence;
// the median over `repeat` runs, each after its own (untimed) prefill.
// N random rank-`rank` PEFT adapters for m's linear layers named in `targets`, written under dir and loaded.
std::vector<std::shared_ptr<const model::LoraAdapter>> random_adapters(ModelInstance& m, int n, int rank, std::string targets,
                                                                       bool bf16, const fs::path& dir) {
  if (targets == "all") targets = "q_proj,k_proj,v_proj,o_proj,gate_proj,up_proj,down_proj";
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<std::shared_ptr<const model::LoraAdapter>> out;
  for (int a = 0; a < n; ++a) {
    const fs::path d = dir / ("adapter" + std::to_string(a));
    fs::create_directories(d);
    std::ofstream(d / "adapter_config.json") << "{\"peft_type\": \"LORA\", \"r\": " << rank << ", \"lora_alpha\": " << 2 * rank << "}\n";
    std::vector<std::pair<std::string, Tensor>> tensors;
    for (int64_t l = 0; l < m.config().num_layers; ++l) {
      const model::LayerWeights& L = m.model().layer(l);
      const std::pair<const char*, const Tensor*> modules[] = {{"self_attn.q_proj", &L.q}, {"self_attn.k_proj", &L.k}, {"self_attn.v_proj", &L.v},
                                                               {"self_attn.o_proj", &L.o}, {"mlp.gate_proj", &L.gate}, {"mlp.up_proj", &L.up},
                                                               {"mlp.down_proj", &L.down}};
      for (auto [name, w] : modules) {
        const std::string leaf = std::string(name).substr(std::string(name).find('.') + 1);
        if (w->empty() || ("," + targets + ",").find("," + leaf + ",") == std::string::npos) continue;
        const std::string prefix = "base_model.model.model.layers." + std::to_string(l) + "." + name;
        Tensor A = Tensor::zeros_f32({rank, w->dim(1)}), B = Tensor::zeros_f32({w->dim(0), rank});
        for (Tensor* t : {&A, &B}) {
          for (int64_t i = 0; i < t->numel(); ++i) t->as<float>()[i] = normal(rng);
          if (!bf16) continue;
          Tensor h = Tensor::zeros(DType::BF16, t->shape);  // rounded to nearest even, as torch does
          for (int64_t i = 0; i < t->numel(); ++i) {
            uint32_t bits;
            std::memcpy(&bits, t->as<float>() + i, 4);
            h.as<uint16_t>()[i] = uint16_t((bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16);
          }
          *t = std::move(h);
        }
        tensors.emplace_back(prefix + ".lora_A.weight", std::move(A));
        tensors.emplace_back(prefix + ".lora_B.weight", std::move(B));
      }
    }
    std::vector<std::pair<std::string, const Tensor*>> named;
    for (auto& [name, t] : tensors) named.emplace_back(name, &t);
    model::write_safetensors((d / "adapter_model.safetensors").string(), named);
    out.push_back(m.load_adapter(d.string(), "adapter" + std::to_string(a)));
  }
  return out;
}

// tokens[from, to) of one sequence (the ones before already in kv) in forward passes of at most `slice`
// tokens, each asking for the logits of its last token only.
void feed(const ForwardPass& pass, kvcache::SequenceKv& kv, const std::vector<int32_t>& tokens, int64_t from, int64_t to, int64_t slice) {
  for (int64_t p = from; p < to; p += slice) {
    model::Batch batch;
    for (int64_t i = p; i < std::min(to, p + slice); ++i) {
      batch.tokens.push_back(tokens[size_t(i)]);
      batch.positions.push_back(i);
      batch.seq.push_back(0);
    }
    batch.logit_rows = {int64_t(batch.tokens.size()) - 1};
    pass.forward(batch, {&kv});
  }
}

// Seconds to prefill `tokens` as one fresh sequence, fed as the daemon's scheduler feeds a prompt: in
// slices of `slice` tokens (SchedulerLimits::max_batch_tokens; llama-bench's n_ubatch is 512 too).
double prefill_seconds(ModelInstance& m, const std::vector<int32_t>& tokens, int64_t slice) {
  double seconds = 0;
  m.runner().exclusive([&](const ForwardPass& pass) {
    kvcache::SequenceKv kv;
    if (!kv.reserve(pass.kv, int64_t(tokens.size()))) throw EngineError("the prompt does not fit in the KV cache");
    const double a = now();
    feed(pass, kv, tokens, 0, int64_t(tokens.size()), slice);
    seconds = now() - a;
    kv.release(pass.kv);
  });
  return seconds;
}

// Tokens per second of single-token steps after each of `contexts` tokens: a sequence per context is
// prefilled (in 2048-token slices, untimed), then they take turns of kTurnSteps steps, so that a shared
// machine's drifting bandwidth slows every context alike and their ratio holds (turns of one step gave
// the same ratios on Zen 5; eight leave a switch's cold caches to one step in eight). The median of
// `repeat` runs per context.
constexpr int64_t kTurnSteps = 8;

// Bytes of KV cache a decode step reads at `context` keys, as the pool stores them: every attention
// layer's keys and values (keys alone for latent attention's shared rows), the last `sliding_window` of
// them in a sliding-window layer, nothing in a recurrent one. At long contexts they join the weights in
// the step's bandwidth floor.
double kv_step_bytes(const kvcache::KvPool& kv, const model::ModelConfig& c, int64_t context) {
  const int64_t kinds = kv.layer_shape()[0];
  double bytes = 0;
  for (int64_t l = 0; l < kv.layers(); ++l) {
    if (kv.recurrent(l)) continue;
    const bool sliding = c.sliding_window && (c.sliding_layers.empty() || c.sliding_layers[size_t(l)]);
    bytes += double(sliding ? std::min(context, *c.sliding_window) : context) * double(kinds * kv.row_bytes());
  }
  return bytes;
}

struct ContextRates {
  std::vector<double> rates;     // tokens/s at each context
  std::vector<double> kv_bytes;  // KV bytes a step reads there
};
ContextRates decode_at_contexts(ModelInstance& m, const std::vector<int64_t>& contexts, int64_t steps, int repeat) {
  ContextRates out;
  const int64_t longest = *std::max_element(contexts.begin(), contexts.end());
  std::mt19937 rng(5);
  std::vector<int32_t> tokens(size_t(longest + steps));
  for (int32_t& t : tokens) t = int32_t(rng() % uint32_t(m.config().vocab_size));
  std::vector<std::vector<double>> rates(contexts.size());
  for (int r = 0; r < repeat; ++r)
    m.runner().exclusive([&](const ForwardPass& pass) {
      std::vector<kvcache::SequenceKv> kv(contexts.size());
      for (size_t i = 0; i < contexts.size(); ++i) {
        if (!kv[i].reserve(pass.kv, contexts[i] + steps)) throw EngineError("the contexts do not fit in the KV cache");
        feed(pass, kv[i], tokens, 0, contexts[i], 2048);
      }
      std::vector<double> seconds(contexts.size());
      for (int64_t step = 0; step < steps; step += kTurnSteps)
        for (size_t i = 0; i < contexts.size(); ++i) {
          const int64_t from = contexts[i] + step, to = contexts[i] + std::min(steps, step + kTurnSteps);
          const double a = now();
          feed(pass, kv[i], tokens, from, to, 1);
          seconds[i] += now() - a;
        }
      for (size_t i = 0; i < contexts.size(); ++i) {
        rates[i].push_back(double(steps) / seconds[i]);
        kv[i].release(pass.kv);
      }
      if (out.kv_bytes.empty())  // the same every repeat
        for (int64_t n : contexts) out.kv_bytes.push_back(kv_step_bytes(pass.kv, m.config(), n + steps / 2));
    });
  for (std::vector<double>& r : rates) out.rates.push_back(median(r));
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::string model, make_dir, shape = "qwen2.5-0.5b", dtype = "bf16", compute_dtype = "auto", kernels = "auto";
  std::string device = "cpu", moe_device = "cpu", kv_dtype = ModelLoadOptions().kv_dtype;
  double bandwidth_given = 0;  // GB/s for the roofline instead of measuring the host's
  int threads = 0, repeat = 3, batch = 1, adapters = 0, lora_rank = 16;
  std::string lora_targets = "q_proj,v_proj", lora_dtype = "bf16";
  int64_t prompt = 128, decode = 64, context = 0, slice = scheduler::SchedulerLimits().max_batch_tokens;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&] { return i + 1 < argc ? std::string(argv[++i]) : std::string(); };
    if (a == "-t" || a == "--threads") threads = std::stoi(value());
    else if (a == "--prompt") prompt = std::stoll(value());
    else if (a == "--slice") slice = std::stoll(value());
    else if (a == "--decode") decode = std::stoll(value());
    else if (a == "--repeat") repeat = std::stoi(value());
    else if (a == "--batch") batch = std::stoi(value());
    else if (a == "--make-random") make_dir = value();
    else if (a == "--shape") shape = value();
    else if (a == "--dtype") dtype = compute_dtype = value();
    else if (a == "--kernels") kernels = value();
    else if (a == "--device") device = value();
    else if (a == "--moe_device") moe_device = value();
    else if (a == "--bandwidth") bandwidth_given = std::stod(value());
    else if (a == "--kv_dtype") kv_dtype = value();
    else if (a == "--context") context = std::stoll(value());
    else if (a == "--adapters") adapters = std::stoi(value());
    else if (a == "--lora_rank") lora_rank = std::stoi(value());
    else if (a == "--lora_targets") lora_targets = value();
    else if (a == "--lora_dtype") lora_dtype = value();
    else if (a.starts_with("-")) return std::fprintf(stderr, "unknown option %s\n", a.c_str()), 2;
    else model = a;
  }
  if (!make_dir.empty()) return make_random(make_dir, shape, dtype);
  if (model.empty()) return std::fprintf(stderr, "usage: ftllm-bench MODEL [-t N] [--prompt N] [--slice N] [--decode N] [--repeat R] [--batch B]\n"), 2;
  if (slice < 1) return std::fprintf(stderr, "ftllm-bench: --slice takes a positive token count\n"), 2;

  size_t rss_before = rss_bytes();
  double t0 = now();
  ModelLoadOptions o;
  o.path = model;
  o.threads = threads;
  o.context_length = std::max({prompt, context, context > 0 ? kShortContext : 0}) + decode + 8;
  o.max_sequences = std::max(batch, context > 0 ? 2 : 1);  // --context: a short and a long sequence side by side
  o.dtype = compute_dtype;
  o.kernels = kernels;
  o.device = device;
  o.moe_device = moe_device;
  o.kv_dtype = kv_dtype;
  o.max_loras = std::max(adapters, 1);
  std::unique_ptr<ModelInstance> m;
  try {
    m = ModelInstance::load(o);
  } catch (const std::exception& e) {
    return std::fprintf(stderr, "ftllm-bench: %s\n", e.what()), 1;
  }
  double load_s = now() - t0;
  // Touch every weight page once (a first prefill) so RSS counts the weights actually used.
  std::vector<int32_t> tokens(static_cast<size_t>(prompt));
  std::mt19937 rng(3);
  for (auto& t : tokens) t = int32_t(rng() % uint32_t(m->config().vocab_size));
  test::prompt_logits(*m, tokens, {prompt - 1});
  size_t rss = rss_bytes() - rss_before;
  std::vector<std::shared_ptr<const model::LoraAdapter>> loras;
  const fs::path lora_dir = fs::temp_directory_path() / ("ftllm-bench-adapters-" + std::to_string(getpid()));
  if (adapters > 0) {
    try {
      loras = random_adapters(*m, adapters, lora_rank, lora_targets, lora_dtype == "bf16", lora_dir);
    } catch (const std::exception& e) {
      fs::remove_all(lora_dir);
      return std::fprintf(stderr, "ftllm-bench: adapters: %s\n", e.what()), 1;
    }
    fs::remove_all(lora_dir);
  }

  std::vector<double> prefill, decode_rates, lora_rates;
  for (int r = 0; r < repeat; ++r) {
    prefill.push_back(double(prompt) / prefill_seconds(*m, tokens, slice));
    std::vector<GenerationRequest> reqs(static_cast<size_t>(batch));
    for (auto& q : reqs) {
      q.prompt = {tokens[0]};
      q.sampling.temperature = 0;
      q.max_tokens = int32_t(decode);
      q.ignore_eos = true;
    }
    double a = now();
    test::generate(*m, reqs);
    decode_rates.push_back(double(decode * batch) / (now() - a));
    if (loras.empty()) continue;
    for (size_t i = 0; i < reqs.size(); ++i) reqs[i].adapter = loras[i % loras.size()];
    a = now();
    test::generate(*m, reqs);
    lora_rates.push_back(double(decode * batch) / (now() - a));
  }
  const auto& c = m->config();
  const int nthreads = threads ? threads : int(std::thread::hardware_concurrency());
  // Bytes one decode step reads: every weight, except an untied input embedding (one row is looked up)
  // and, in a mixture of experts, the experts a token does not route to (k of E are read).
  double step_bytes = double(m->model().weight_bytes());
  for (auto& [name, t] : m->model().named_tensors()) {
    if (name == "model.embed_tokens.weight" && !c.tie_word_embeddings) step_bytes -= double(t->bytes());
    if (name.find(".mlp.experts.") != std::string::npos)
      step_bytes -= double(t->bytes()) * (1.0 - double(c.moe.experts_per_token) / double(c.moe.num_experts));
  }
  // On a GPU the roofline is the device's bandwidth, which ftllm-gpu-bench measures (--bandwidth).
  const double bandwidth = bandwidth_given > 0 ? bandwidth_given : read_bandwidth(nthreads);
  std::printf("model %s (%s, %lld layers, hidden %lld, %s), %zu file bytes, %d threads, %s kernels, on %s\n",
              model.c_str(), c.architecture.c_str(), (long long)c.num_layers, (long long)c.hidden_size, m->dtypes().c_str(),
              m->weight_file_bytes(), nthreads, cpu::kernels_description(m->kernels()).c_str(), m->placement().to_string().c_str());
  std::printf("load %.2f s; RSS after load and one prefill: %.1f MiB = %.2f x the weight file\n", load_s,
              double(rss) / 1048576.0, double(rss) / double(m->weight_file_bytes()));
  std::printf("read bandwidth %.1f GB/s; a decode step reads %.1f MB of weights%s: ceiling %.1f tokens/s\n", bandwidth,
              step_bytes / 1e6, c.moe.num_experts ? " (the routed experts' share only)" : "", bandwidth * 1e9 / step_bytes);
  std::printf("%-18s %12s %10s %10s\n", "test", "tokens/s", "ms/token", "roofline");
  double p = median(prefill), d = median(decode_rates);
  std::printf("prefill %-10lld %12.1f %10.2f %10s\n", (long long)prompt, p, 1000.0 / p, "-");
  // Sequences decoded together share each weight read: the roofline is in steps per second.
  std::printf("decode %-4lld x%-5d %12.1f %10.2f %9.0f%%\n", (long long)decode, batch, d, 1000.0 * batch / d,
              100.0 * (d / batch) * step_bytes / (bandwidth * 1e9));
  if (!loras.empty()) {
    const double l = median(lora_rates);
    std::printf("decode %-4lld x%-5d %12.1f %10.2f %9.0f%%  each row one of %d adapters (rank %d, %s, %s, %.1f MB each): %.3f x plain\n",
                (long long)decode, batch, l, 1000.0 * batch / l, 100.0 * (l / batch) * step_bytes / (bandwidth * 1e9), adapters,
                lora_rank, loras[0]->targets().c_str(), lora_dtype.c_str(), double(loras[0]->bytes()) / 1e6, l / d);
    std::printf("spread: plain %.1f-%.1f, adapters %.1f-%.1f tokens/s over %d alternating repeats\n",
                *std::min_element(decode_rates.begin(), decode_rates.end()), *std::max_element(decode_rates.begin(), decode_rates.end()),
                *std::min_element(lora_rates.begin(), lora_rates.end()), *std::max_element(lora_rates.begin(), lora_rates.end()), repeat);
  }
  if (context > 0) {
    std::vector<int64_t> contexts{context};
    if (context != kShortContext) contexts.insert(contexts.begin(), kShortContext);
    const ContextRates at = decode_at_contexts(*m, contexts, decode, repeat);
    const std::vector<double>& rates = at.rates;
    // Here the roofline counts the KV cache the step reads as well as the weights.
    for (size_t i = 0; i < contexts.size(); ++i)
      std::printf("decode %-4lld at %-6lld %7.1f %10.2f %9.0f%%  (+%.1f MB of KV cache a step)\n", (long long)decode,
                  (long long)contexts[i], rates[i], 1000.0 / rates[i],
                  100.0 * rates[i] * (step_bytes + at.kv_bytes[i]) / (bandwidth * 1e9), at.kv_bytes[i] / 1e6);
    if (contexts.size() > 1)
      std::printf("a token at %lld keys takes %.2fx as long as at %lld (turns of %lld steps alternated, medians of %d runs); "
                  "the bytes it reads, %.2fx\n",
                  (long long)context, rates[0] / rates[1], (long long)kShortContext, (long long)kTurnSteps, repeat,
                  (step_bytes + at.kv_bytes[1]) / (step_bytes + at.kv_bytes[0]));
  }
  return 0;
}
