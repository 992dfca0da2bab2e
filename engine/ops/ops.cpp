#include "ops.h"

#include "cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "../core/error.h"
#include "../cpu/kernels.h"
#include "../cpu/thread_pool.h"
#if defined(FTLLM_WITH_CUDA)
#include "../cuda/cuda_ops.h"
#include "../cuda/nccl.h"
#include "../cuda/runtime.h"
#endif

namespace ftllm::ops {

// Every op picks its backend from where its first tensor lives; a tensor on a device in a build without
// CUDA cannot exist, so the dispatch compiles away there.
#if defined(FTLLM_WITH_CUDA)
#define FTLLM_ON_CUDA(t, call) \
  if ((t).device.is_cuda()) {  \
    call;                      \
    return;                    \
  }
bool cuda_built() { return true; }
#else
#define FTLLM_ON_CUDA(t, call)
bool cuda_built() { return false; }
#endif

Tensor zeros([[maybe_unused]] Device device, std::vector<int64_t> shape) {
#if defined(FTLLM_WITH_CUDA)
  if (device.is_cuda()) return cuda::zeros(device, DType::F32, std::move(shape));
#endif
  return Tensor::zeros_f32(std::move(shape));
}

Tensor scratch(const Context& ctx, std::vector<int64_t> shape) {
  if (ctx.device.is_cuda()) return zeros(ctx.device, std::move(shape));
  return Tensor::uninitialized(DType::F32, std::move(shape));
}

bool all_reduce_sum(const std::vector<Tensor*>& parts) {
#if defined(FTLLM_WITH_CUDA)
  return cuda::all_reduce_sum(parts);
#else
  (void)parts;
  return false;
#endif
}

uint64_t device_available_bytes(Device device) {
#if defined(FTLLM_WITH_CUDA)
  if (device.is_cuda()) return cuda::available_bytes(device);
#endif
  throw EngineError("device " + device.name() + " is not a CUDA device of this build");
}

Tensor to_device(const Tensor& t, Device to) {
  if (t.device == to) return t;
#if defined(FTLLM_WITH_CUDA)
  return cuda::to_device(t, to);
#else
  throw EngineError("this build has no CUDA backend: tensors stay on the cpu");
#endif
}

namespace {
void same_device(const char* op, const Tensor& a, const Tensor& b) {
  if (!(a.device == b.device))
    throw EngineError(std::string(op) + ": operands on " + a.device.name() + " and " + b.device.name());
}
}  // namespace

std::vector<cpu::Q8Block> quantized_rows(Context& ctx, DType wt, const float* x, int64_t rows, int64_t K) {
  std::vector<cpu::Q8Block> xq;
  if (!ctx.kernels.uses_q8(wt)) return xq;
  xq.resize(size_t(rows * (K / 32)));
  ctx.pool.parallel_for(rows, 4, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) cpu::quantize_activations(ctx.kernels, wt, x + r * K, K, xq.data() + r * (K / 32));
  });
  return xq;
}

namespace {
void check_linear(const Tensor& x, const Tensor& w, const Tensor& y) {
  if (w.dim(1) != x.dim(1) || y.dim(0) != x.dim(0) || y.dim(1) != w.dim(0))
    throw EngineError("linear: shapes " + shape_string(x.shape) + " x " + shape_string(w.shape) + " -> " +
                      shape_string(y.shape) + " do not fit");
  same_device("linear", x, w);
}

// Output features [n0, n1) of y[T, N] = x · wᵀ (+ bias): one thread's share of a linear layer.
void linear_rows(Context& ctx, const float* xs, const cpu::Q8Block* xq, int64_t T, int64_t K, const Tensor& w, const Tensor* bias,
                 int64_t n0, int64_t n1, float* ys) {
  const int64_t N = w.dim(0);
  ctx.kernels.matmul(w.dtype, xs, xq, T, K, w.data, n0, n1, ys, N);
  if (bias)
    for (int64_t t = 0; t < T; ++t)
      for (int64_t n = n0; n < n1; ++n) ys[t * N + n] += bias->as<float>()[n];
}
}  // namespace

void linear(Context& ctx, const Tensor& x, const Tensor& w, const Tensor* bias, Tensor& y) {
  const int64_t T = x.dim(0), K = x.dim(1), N = w.dim(0);
  check_linear(x, w, y);
  FTLLM_ON_CUDA(x, cuda::linear(x, w, bias, y))
  const float* xs = x.as<float>();
  float* ys = y.as<float>();
  // Quantized weights dot int8 activations: quantize x once, row by row, before the matmul.
  const std::vector<cpu::Q8Block> xq = quantized_rows(ctx, w.dtype, xs, T, K);
  // Split the output features: each thread streams its own slice of the weight once (with --device numa,
  // a slice from its own node's share).
  ctx.pool.parallel_for_groups(N, 16, [&](int64_t n0, int64_t n1) { linear_rows(ctx, xs, xq.data(), T, K, w, bias, n0, n1, ys); });
}

void linear_many(Context& ctx, const Tensor& x, std::span<const LinearOut> outs) {
  for (const LinearOut& o : outs) check_linear(x, *o.w, *o.y);
  // On a GPU each is one launch anyway; weights split over NUMA nodes keep linear's per-node rows.
  if (x.device.is_cuda() || ctx.pool.groups() > 1 || outs.size() == 1) {
    for (const LinearOut& o : outs) linear(ctx, x, *o.w, o.bias, *o.y);
    return;
  }
  const int64_t T = x.dim(0), K = x.dim(1);
  const float* xs = x.as<float>();
  // x quantized once for each activation format the weights want (none, per 32, per 256 values).
  std::vector<cpu::Q8Block> formats[3];
  std::vector<const cpu::Q8Block*> xq(outs.size());
  std::vector<int64_t> first_row(outs.size() + 1, 0);
  for (size_t i = 0; i < outs.size(); ++i) {
    const DType t = outs[i].w->dtype;
    const int format = ctx.kernels.uses_q8(t) ? (cpu::q8_per_256(t) ? 2 : 1) : 0;
    if (format && formats[format].empty()) formats[format] = quantized_rows(ctx, t, xs, T, K);
    xq[i] = formats[format].data();
    first_row[i + 1] = first_row[i] + outs[i].w->dim(0);
  }
  ctx.pool.parallel_for(first_row.back(), 16, [&](int64_t r0, int64_t r1) {
    for (size_t i = 0; i < outs.size(); ++i) {  // the part of [r0, r1) in output i's rows
      const int64_t n0 = std::max(r0, first_row[i]) - first_row[i], n1 = std::min(r1, first_row[i + 1]) - first_row[i];
      if (n0 < n1) linear_rows(ctx, xs, xq[i], T, K, *outs[i].w, outs[i].bias, n0, n1, outs[i].y->as<float>());
    }
  });
}

void lora(Context& ctx, const Tensor& x, std::span<const LoraSegment> segments) {
  const int64_t K = x.dim(1);
  for (const LoraSegment& s : segments) {
    same_device("lora", x, *s.a);
    same_device("lora", x, *s.bt);
    same_device("lora", x, *s.y);
    if (s.a->dtype != s.bt->dtype || (s.a->dtype != DType::F32 && s.a->dtype != DType::BF16 && s.a->dtype != DType::F16))
      throw EngineError("lora: A and Bᵀ must be float32, bfloat16 or float16 alike");
    if (s.a->dim(1) != K || s.bt->dim(1) != s.y->dim(1) || s.a->dim(0) != s.bt->dim(0) || s.y->dim(0) != x.dim(0))
      throw EngineError("lora: A " + shape_string(s.a->shape) + " and Bᵀ " + shape_string(s.bt->shape) + " do not fit x " +
                        shape_string(x.shape) + " and y " + shape_string(s.y->shape));
  }
  std::vector<std::pair<const LoraSegment*, int64_t>> rows;
  for (const LoraSegment& s : segments)
    for (int64_t r : s.rows) rows.emplace_back(&s, r);
  if (rows.empty()) return;
#if defined(FTLLM_WITH_CUDA)
  if (x.device.is_cuda()) {
    std::vector<cuda::LoraRow> dev_rows;
    int max_rank = 0;
    int64_t max_n = 0;
    for (auto [s, row] : rows) {
      const int dtype = s->a->dtype == DType::F32 ? 0 : s->a->dtype == DType::BF16 ? 1 : 2;
      dev_rows.push_back({s->a->data, s->bt->data, s->y->as<float>(), s->scale, int(s->a->dim(0)), dtype, s->y->dim(1), row});
      max_rank = std::max(max_rank, int(s->a->dim(0)));
      max_n = std::max(max_n, s->y->dim(1));
    }
    cuda::lora(x, dev_rows, max_rank, max_n);
    return;
  }
#endif
  // A (row, segment) per task: its r dot products with A (the matmul kernel of A's dtype), then r scaled
  // rows of Bᵀ added to its output (16-bit rows widened first).
  ctx.pool.parallel_for(int64_t(rows.size()), 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> t, widened;
    for (int64_t i = i0; i < i1; ++i) {
      const auto [s, row] = rows[size_t(i)];
      const int64_t r = s->a->dim(0), N = s->y->dim(1);
      t.resize(size_t(r));
      ctx.kernels.matmul(s->a->dtype, x.as<float>() + row * K, nullptr, 1, K, s->a->data, 0, r, t.data(), r);
      float* yr = s->y->as<float>() + row * N;
      const size_t bt_row = row_bytes(s->bt->dtype, N);
      for (int64_t j = 0; j < r; ++j) {
        const void* b = static_cast<const char*>(s->bt->data) + size_t(j) * bt_row;
        if (s->bt->dtype != DType::F32) {
          widened.resize(size_t(N));
          ctx.kernels.to_f32(s->bt->dtype, b, widened.data(), N);
          b = widened.data();
        }
        ctx.kernels.axpy(s->scale * t[size_t(j)], static_cast<const float*>(b), yr, N);
      }
    }
  });
}

void rmsnorm(Context& ctx, const Tensor& x, const Tensor& w, float eps, Tensor& out, float w_offset) {
  same_device("rmsnorm", x, w);
  FTLLM_ON_CUDA(x, cuda::rmsnorm(x, w, eps, out, w_offset))
  const int64_t d = w.numel(), rows = x.numel() / d;
  const float* xs = x.as<float>();
  float* os = out.as<float>();
  // offset + w in float32 first, as transformers' Gemma computes it.
  std::vector<float> shifted;
  if (w_offset != 0)
    for (int64_t i = 0; i < d; ++i) shifted.push_back(w_offset + w.as<float>()[i]);
  const float* ws = shifted.empty() ? w.as<float>() : shifted.data();
  ctx.pool.parallel_for(rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) ctx.kernels.rmsnorm(xs + r * d, ws, d, eps, os + r * d);
  });
}

void embedding(Context& ctx, const Tensor& table, std::span<const int32_t> ids, Tensor& out) {
  const int64_t vocab = table.dim(0), d = table.dim(1);
  const size_t bytes = row_bytes(table.dtype, d);
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      throw EngineError("token id " + std::to_string(id) + " is outside the vocabulary of " + std::to_string(vocab));
  FTLLM_ON_CUDA(table, cuda::embedding(table, ids, out))
  ctx.pool.parallel_for(int64_t(ids.size()), 4, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      ctx.kernels.to_f32(table.dtype, static_cast<const char*>(table.data) + size_t(ids[size_t(t)]) * bytes,
                         out.as<float>() + t * d, d);
  });
}

void silu_mul(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out) {
  FTLLM_ON_CUDA(gate, cuda::silu_mul(gate, up, out))
  const int64_t n = gate.numel();
  ctx.pool.parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    ctx.kernels.silu_mul(gate.as<float>() + i0, up.as<float>() + i0, out.as<float>() + i0, i1 - i0);
  });
}

void clamped_swiglu_rows(const float* gate, const float* up, float* out, int64_t n, float alpha, float limit) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = std::min(gate[i], limit), u = std::clamp(up[i], -limit, limit);
    out[i] = (u + 1.0f) * (g / (1.0f + std::exp(-alpha * g)));
  }
}

void clamped_swiglu(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out, float alpha, float limit) {
  FTLLM_ON_CUDA(gate, cuda::clamped_swiglu(gate, up, out, alpha, limit))
  ctx.pool.parallel_for(gate.numel(), 4096, [&](int64_t i0, int64_t i1) {
    clamped_swiglu_rows(gate.as<float>() + i0, up.as<float>() + i0, out.as<float>() + i0, i1 - i0, alpha, limit);
  });
}

void softcap(Context& ctx, Tensor& x, float cap) {
  FTLLM_ON_CUDA(x, cuda::softcap(x, cap))
  float* v = x.as<float>();
  ctx.pool.parallel_for(x.numel(), 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) v[i] = cap * std::tanh(v[i] / cap);
  });
}

void gelu_tanh_mul(Context& ctx, const Tensor& gate, const Tensor& up, Tensor& out) {
  FTLLM_ON_CUDA(gate, cuda::gelu_tanh_mul(gate, up, out))
  const int64_t n = gate.numel();
  ctx.pool.parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    ctx.kernels.gelu_tanh_mul(gate.as<float>() + i0, up.as<float>() + i0, out.as<float>() + i0, i1 - i0);
  });
}

void gather_rows(Context&, const Tensor& x, std::span<const int64_t> rows, Tensor& out) {
  FTLLM_ON_CUDA(x, cuda::gather_rows(x, rows, out))
  const int64_t d = x.dim(1);
  for (size_t i = 0; i < rows.size(); ++i)
    std::memcpy(out.as<float>() + int64_t(i) * d, x.as<float>() + rows[i] * d, size_t(d) * 4);
}

void scatter_add_rows(Context& ctx, const Tensor& y, std::span<const int64_t> rows, std::span<const float> weights,
                      Tensor& out) {
  FTLLM_ON_CUDA(y, cuda::scatter_add_rows(y, rows, weights, out))
  const int64_t d = out.dim(1);
  for (size_t i = 0; i < rows.size(); ++i)
    ctx.kernels.axpy(weights[i], y.as<float>() + int64_t(i) * d, out.as<float>() + rows[i] * d, d);
}

void scale_rows(Context&, Tensor& x, const Tensor& scale, bool sigmoid) {
  same_device("scale_rows", x, scale);
  FTLLM_ON_CUDA(x, cuda::scale_rows(x, scale, sigmoid))
  const int64_t T = x.dim(0), N = x.dim(1);
  for (int64_t t = 0; t < T; ++t) {
    const float s = scale.as<float>()[t], g = sigmoid ? 1.0f / (1.0f + std::exp(-s)) : s;
    for (int64_t n = 0; n < N; ++n) x.as<float>()[t * N + n] *= g;
  }
}

std::vector<int32_t> argmax_rows(Context&, const Tensor& logits) {
#if defined(FTLLM_WITH_CUDA)
  if (logits.device.is_cuda()) return cuda::argmax_rows(logits);
#endif
  const int64_t R = logits.dim(0), V = logits.dim(1);
  std::vector<int32_t> ids;
  for (int64_t r = 0; r < R; ++r) {
    const float* row = logits.as<float>() + r * V;
    ids.push_back(int32_t(std::max_element(row, row + V) - row));
  }
  return ids;
}

void sigmoid_mul(Context& ctx, Tensor& x, const Tensor& gate) {
  same_device("sigmoid_mul", x, gate);
  FTLLM_ON_CUDA(x, cuda::sigmoid_mul(x, gate))
  ctx.pool.parallel_for(x.numel(), 4096, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) x.as<float>()[i] *= 1.0f / (1.0f + std::exp(-gate.as<float>()[i]));
  });
}

void add(Context& ctx, Tensor& x, const Tensor& y) {
  same_device("add", x, y);
  FTLLM_ON_CUDA(x, cuda::add(x, y))
  const int64_t n = x.numel();
  ctx.pool.parallel_for(n, 4096, [&](int64_t i0, int64_t i1) {
    ctx.kernels.axpy(1.0f, y.as<float>() + i0, x.as<float>() + i0, i1 - i0);
  });
}

void rope(Context& ctx, Tensor& x, int64_t heads, const Tensor& cos, const Tensor& sin) {
  rope_blocks(ctx, x, {heads, 2 * cos.dim(1), 0}, cos, sin, false);
}

void rope_blocks(Context&, Tensor& x, HeadBlocks b, const Tensor& cos, const Tensor& sin, bool interleaved) {
  same_device("rope", x, cos);
  FTLLM_ON_CUDA(x, cuda::rope(x, b.heads, cos, sin, interleaved, x.dim(1), b.offset, b.stride))
  const int64_t T = x.dim(0), row = x.dim(1), half = cos.dim(1), d = half * 2;
  if (d > 1024) throw EngineError("rope: heads of " + std::to_string(d) + " values (at most 1024)");
  float tmp[1024];
  for (int64_t t = 0; t < T; ++t) {
    const float* c = cos.as<float>() + t * half;
    const float* s = sin.as<float>() + t * half;
    for (int64_t h = 0; h < b.heads; ++h) {
      float* v = x.as<float>() + t * row + b.offset + h * b.stride;
      for (int64_t i = 0; i < half; ++i) {
        const float a = interleaved ? v[2 * i] : v[i], bb = interleaved ? v[2 * i + 1] : v[i + half];
        tmp[i] = a * c[i] - bb * s[i];
        tmp[i + half] = bb * c[i] + a * s[i];
      }
      std::memcpy(v, tmp, size_t(d) * 4);
    }
  }
}

void rmsnorm_prefix(Context& ctx, Tensor& x, const Tensor& w, float eps) {
  same_device("rmsnorm", x, w);
  FTLLM_ON_CUDA(x, cuda::rmsnorm_prefix(x, w, eps))
  const int64_t T = x.dim(0), row = x.dim(1), n = w.numel();
  ctx.pool.parallel_for(T, 8, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) ctx.kernels.rmsnorm(x.as<float>() + t * row, w.as<float>(), n, eps, x.as<float>() + t * row);
  });
}

void head_matmul(Context& ctx, const Tensor& x, HeadBlocks xb, const Tensor& w, const HeadMatmul& m, Tensor& y,
                 HeadBlocks yb) {
  same_device("head_matmul", x, w);
#if defined(FTLLM_WITH_CUDA)
  if (x.device.is_cuda()) {
    return cuda::head_matmul(x, {xb.heads, xb.stride, xb.offset}, w, {m.in, m.out, m.w_head_rows, m.w_first_row, m.transposed},
                             y, {yb.heads, yb.stride, yb.offset});
  }
#endif
  const int64_t T = x.dim(0), xrow = x.dim(1), yrow = y.dim(1), wrow = w.dim(1);
  ctx.pool.parallel_for(T * xb.heads, 1, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) {
      const int64_t t = i / xb.heads, h = i % xb.heads;
      const float* xh = x.as<float>() + t * xrow + xb.offset + h * xb.stride;
      float* yh = y.as<float>() + t * yrow + yb.offset + h * yb.stride;
      const float* wh = w.as<float>() + (h * m.w_head_rows + m.w_first_row) * wrow;
      if (m.transposed) {
        std::fill(yh, yh + m.out, 0.0f);
        for (int64_t k = 0; k < m.in; ++k) ctx.kernels.axpy(xh[k], wh + k * wrow, yh, m.out);
      } else {
        for (int64_t j = 0; j < m.out; ++j) yh[j] = ctx.kernels.dot(xh, wh + j * wrow, m.in);
      }
    }
  });
}

void copy_blocks(Context&, const Tensor& src, HeadBlocks sb, Tensor& dst, HeadBlocks db, int64_t n) {
  FTLLM_ON_CUDA(src, cuda::copy_blocks(src, {sb.heads, sb.stride, sb.offset}, dst, {db.heads, db.stride, db.offset}, n))
  const int64_t T = src.dim(0), srow = src.dim(1), drow = dst.dim(1);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < sb.heads; ++h)
      std::memcpy(dst.as<float>() + t * drow + db.offset + h * db.stride, src.as<float>() + t * srow + sb.offset + h * sb.stride,
                  size_t(n) * 4);
}

#if defined(FTLLM_WITH_CUDA)
namespace {
const cuda::AttentionIndex& device_index(const AttentionBatch& b, Device d) {
  for (auto& [where, index] : b.device_index)
    if (where == d) return *index;
  b.device_index.emplace_back(d, cuda::make_attention_index(d, b.pos, b.seq, b.block_table, b.table_start));
  return *b.device_index.back().second;
}
cuda::KvLayer device_kv(const KvLayer& kv) { return {kv.keys, kv.values, kv.block_bytes, kv.row_bytes, kv.dtype}; }
}  // namespace
#endif

void store_kv(Context&, const AttentionBatch& b, const Tensor& k, const Tensor* v, const KvLayer& kv, int64_t block_tokens,
              int64_t head_dim) {
  if (!(k.device == kv.device)) throw EngineError("store_kv: rows on " + k.device.name() + ", cache on " + kv.device.name());
  FTLLM_ON_CUDA(k, cuda::store_kv(device_index(b, k.device), k, v, device_kv(kv), block_tokens, head_dim))
  const int64_t T = k.dim(0), row = k.dim(1), heads = row / head_dim, head_bytes = kvcache::kv_head_bytes(kv.dtype, head_dim);
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = b.pos[size_t(t)];
    const int64_t at = int64_t(b.block_table[size_t(b.table_start[size_t(b.seq[size_t(t)])] + p / block_tokens)]) *
                           kv.block_bytes + (p % block_tokens) * kv.row_bytes;
    for (int64_t h = 0; h < heads; ++h) {
      kvcache::kv_store_head(kv.dtype, k.as<float>() + t * row + h * head_dim, head_dim, kv.keys + at + h * head_bytes);
      if (v) kvcache::kv_store_head(kv.dtype, v->as<float>() + t * row + h * head_dim, head_dim, kv.values + at + h * head_bytes);
    }
  }
}

void paged_attention(Context& ctx, const Tensor& q, const AttentionBatch& b, const KvLayer& kv, const AttentionShape& sh,
                     Tensor& out) {
  if (!(q.device == kv.device)) throw EngineError("attention: queries on " + q.device.name() + ", cache on " + kv.device.name());
#if defined(FTLLM_WITH_CUDA)
  if (q.device.is_cuda()) {
    const cuda::AttentionParams p{sh.heads, sh.kv_heads, sh.head_dim, sh.block_tokens, sh.window, sh.value_dim, sh.scale, sh.softcap,
                                       sh.sinks ? sh.sinks->as<float>() : nullptr};
    return cuda::paged_attention(device_index(b, q.device), q, device_kv(kv), p, out);
  }
#endif
  cpu_paged_attention(ctx, q, b, kv, sh, out);
}

}  // namespace ftllm::ops
