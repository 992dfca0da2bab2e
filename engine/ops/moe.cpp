#include "moe.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <numeric>

#include "../core/error.h"
#include "../cpu/kernels.h"
#include "../cpu/thread_pool.h"

namespace ftllm::ops {

Routes route_softmax_topk(const Tensor& logits, int64_t k, bool renormalize, int64_t n_group, int64_t topk_group,
                          float scale) {
  const int64_t T = logits.dim(0), E = logits.dim(1), per_group = E / n_group;
  if (k < 1 || k > topk_group * per_group)
    throw EngineError("moe: " + std::to_string(k) + " experts per token, of " + std::to_string(topk_group * per_group));
  Routes r;
  r.k = k;
  r.expert.resize(size_t(T * k));
  r.weight.resize(size_t(T * k));
  std::vector<float> prob(static_cast<size_t>(E));
  std::vector<int32_t> order(static_cast<size_t>(E));
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits.as<float>() + t * E;
    const float top = *std::max_element(l, l + E);
    float sum = 0;
    for (int64_t e = 0; e < E; ++e) sum += prob[size_t(e)] = std::exp(l[e] - top);
    for (float& p : prob) p /= sum;
    std::vector<float> choice = prob;
    if (n_group > 1) {  // groups ranked by their best probability; the others' experts sit out
      std::vector<float> best(static_cast<size_t>(n_group));
      for (int64_t g = 0; g < n_group; ++g)
        best[size_t(g)] = *std::max_element(prob.begin() + g * per_group, prob.begin() + (g + 1) * per_group);
      std::vector<int32_t> groups(static_cast<size_t>(n_group));
      std::iota(groups.begin(), groups.end(), 0);
      std::partial_sort(groups.begin(), groups.begin() + topk_group, groups.end(), [&](int32_t a, int32_t b) {
        return best[size_t(a)] > best[size_t(b)] || (best[size_t(a)] == best[size_t(b)] && a < b);
      });
      std::vector<bool> allowed(static_cast<size_t>(n_group), false);
      for (int64_t g = 0; g < topk_group; ++g) allowed[size_t(groups[size_t(g)])] = true;
      for (int64_t e = 0; e < E; ++e)
        if (!allowed[size_t(e / per_group)]) choice[size_t(e)] = -1.0f;
    }
    // The k most probable, ties to the lower index (torch.topk's order does not matter past the choice).
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int32_t a, int32_t b) {
      return choice[size_t(a)] > choice[size_t(b)] || (choice[size_t(a)] == choice[size_t(b)] && a < b);
    });
    std::sort(order.begin(), order.begin() + k);
    float chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += prob[size_t(order[size_t(j)])];
    for (int64_t j = 0; j < k; ++j) {
      r.expert[size_t(t * k + j)] = order[size_t(j)];
      r.weight[size_t(t * k + j)] = (renormalize ? prob[size_t(order[size_t(j)])] / chosen : prob[size_t(order[size_t(j)])]) * scale;
    }
  }
  return r;
}

Routes route_sigmoid_grouped(const Tensor& logits, const Tensor& bias, int64_t k, int64_t n_group, int64_t topk_group,
                             bool renormalize, float scale) {
  const int64_t T = logits.dim(0), E = logits.dim(1), per_group = E / n_group;
  if (k < 1 || k > topk_group * per_group)
    throw EngineError("moe: " + std::to_string(k) + " experts per token, of " + std::to_string(topk_group * per_group) +
                      " in the chosen groups");
  Routes r;
  r.k = k;
  r.expert.resize(size_t(T * k));
  r.weight.resize(size_t(T * k));
  std::vector<float> score(static_cast<size_t>(E)), choice(static_cast<size_t>(E)), group(static_cast<size_t>(n_group));
  std::vector<int32_t> order(static_cast<size_t>(std::max(E, n_group)));
  // Larger first, ties to the lower index.
  auto by = [](const std::vector<float>& v) {
    return [&v](int32_t a, int32_t b) { return v[size_t(a)] > v[size_t(b)] || (v[size_t(a)] == v[size_t(b)] && a < b); };
  };
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t e = 0; e < E; ++e) {
      score[size_t(e)] = 1.0f / (1.0f + std::exp(-logits.as<float>()[t * E + e]));
      choice[size_t(e)] = score[size_t(e)] + bias.as<float>()[e];
    }
    for (int64_t g = 0; g < n_group; ++g) {  // a group's strength: its two best biased scores
      const float* c = choice.data() + g * per_group;
      float best = -INFINITY, second = -INFINITY;
      for (int64_t i = 0; i < per_group; ++i)
        if (c[i] > best) second = best, best = c[i];
        else if (c[i] > second) second = c[i];
      group[size_t(g)] = per_group > 1 ? best + second : best;
    }
    std::iota(order.begin(), order.begin() + n_group, 0);
    std::partial_sort(order.begin(), order.begin() + topk_group, order.begin() + n_group, by(group));
    std::vector<bool> allowed(static_cast<size_t>(n_group), false);
    for (int64_t g = 0; g < topk_group; ++g) allowed[size_t(order[size_t(g)])] = true;
    for (int64_t e = 0; e < E; ++e)
      if (!allowed[size_t(e / per_group)]) choice[size_t(e)] = -INFINITY;
    std::iota(order.begin(), order.begin() + E, 0);
    std::partial_sort(order.begin(), order.begin() + k, order.begin() + E, by(choice));
    std::sort(order.begin(), order.begin() + k);
    float chosen = 0;
    for (int64_t j = 0; j < k; ++j) chosen += score[size_t(order[size_t(j)])];
    for (int64_t j = 0; j < k; ++j) {
      const float s = score[size_t(order[size_t(j)])];
      r.expert[size_t(t * k + j)] = order[size_t(j)];
      r.weight[size_t(t * k + j)] = (renormalize ? s / (chosen + 1e-20f) : s) * scale;
    }
  }
  return r;
}

namespace {

// Output rows per piece of work: small enough that a step's pieces outnumber the threads several times.
int64_t slice_rows(int64_t rows, int64_t experts, int threads) {
  const int64_t want = std::max<int64_t>(1, int64_t(threads) * 4 / std::max<int64_t>(1, experts));
  return std::max<int64_t>(16, (rows / want + 15) / 16 * 16);
}

}  // namespace

namespace {

// Experts in a device's memory: each active expert, in ascending order, takes its tokens' rows through
// the ops of that device and adds them back weighted, so each token's sum runs in the CPU path's order.
void moe_experts_by_ops(Context& ctx, const Tensor& x, const Routes& routes, std::span<const Expert> experts, Tensor& out) {
  const int64_t T = x.dim(0), H = x.dim(1), k = routes.k;
  std::vector<std::vector<int64_t>> rows(experts.size());
  std::vector<std::vector<float>> weights(experts.size());
  for (int64_t i = 0; i < T * k; ++i) {
    rows[size_t(routes.expert[size_t(i)])].push_back(i / k);
    weights[size_t(routes.expert[size_t(i)])].push_back(routes.weight[size_t(i)]);
  }
  out = zeros(x.device, {T, H});
  for (size_t e = 0; e < experts.size(); ++e) {
    if (rows[e].empty()) continue;
    const int64_t n = int64_t(rows[e].size());
    Tensor xs = zeros(x.device, {n, H}), ys = zeros(x.device, {n, H});
    gather_rows(ctx, x, rows[e], xs);
    expert_mlp(ctx, xs, experts[e], ys);
    scatter_add_rows(ctx, ys, rows[e], weights[e], out);
  }
}

}  // namespace

void moe_experts(Context& ctx, const Tensor& x, const Routes& routes, std::span<const Expert> experts, Tensor& out) {
  if (x.device.is_cuda()) return moe_experts_by_ops(ctx, x, routes, experts, out);
  const int64_t T = x.dim(0), H = x.dim(1), k = routes.k, E = int64_t(experts.size());
  const int64_t I = experts.front().gate.dim(0);
  // Group the (token, choice) pairs by expert: expert e's rows are [first[e], first[e + 1]) of the packed
  // buffers, in token order.
  std::vector<int64_t> first(size_t(E) + 1, 0);
  for (int32_t e : routes.expert) ++first[size_t(e) + 1];
  std::partial_sum(first.begin(), first.end(), first.begin());
  std::vector<int64_t> slot(size_t(T * k)), fill(first.begin(), first.end() - 1);
  std::vector<int64_t> token_of(size_t(T * k));
  std::vector<int32_t> expert_of(size_t(T * k));
  for (int64_t i = 0; i < T * k; ++i) {
    const int32_t e = routes.expert[size_t(i)];
    slot[size_t(i)] = fill[size_t(e)]++;
    token_of[size_t(slot[size_t(i)])] = i / k;
    expert_of[size_t(slot[size_t(i)])] = e;
  }
  const int64_t P = T * k;
  std::vector<float> xs(size_t(P * H)), gate(size_t(P * I)), up(size_t(P * I)), ys(size_t(P * H));
  ctx.pool.parallel_for(P, 16, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      std::memcpy(xs.data() + p * H, x.as<float>() + token_of[size_t(p)] * H, size_t(H) * 4);
  });
  std::vector<int32_t> active;
  for (int32_t e = 0; e < E; ++e)
    if (first[size_t(e) + 1] > first[size_t(e)]) active.push_back(e);
  const int threads = ctx.pool.active();

  // gate and up of every active expert, in pieces of output rows.
  const std::vector<cpu::Q8Block> xq = quantized_rows(ctx, experts.front().gate.dtype, xs.data(), P, H);
  struct Piece {
    int32_t expert;
    int64_t r0, r1;
  };
  // With the pool grouped by NUMA node, each expert's rows are split over the nodes as the linear op's
  // are (split_rows), and node g's threads take the pieces in node g's share: bounds[g]..bounds[g + 1].
  std::vector<int64_t> bounds;
  auto pieces_of = [&](int64_t rows) {
    std::vector<Piece> pieces;
    const int groups = ctx.pool.groups();
    const std::vector<int64_t> share = cpu::split_rows(rows, groups);
    const int64_t step = slice_rows(rows / groups, int64_t(active.size()), threads);
    bounds.assign(1, 0);
    for (int g = 0; g < groups; ++g) {
      for (int32_t e : active)
        for (int64_t r = share[size_t(g)]; r < share[size_t(g) + 1]; r += step)
          pieces.push_back({e, r, std::min(share[size_t(g) + 1], r + step)});
      bounds.push_back(int64_t(pieces.size()));
    }
    return pieces;
  };
  // fn(piece, expert, its first packed row, its token count) over the pieces of `rows` output rows.
  auto run_pieces = [&](int64_t rows, const std::function<void(const Piece&, const Expert&, int64_t, int64_t)>& fn) {
    const std::vector<Piece> pieces = pieces_of(rows);
    ctx.pool.parallel_for_bounds(bounds, 1, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) {
        const Piece& pc = pieces[size_t(i)];
        const int64_t p = first[size_t(pc.expert)];
        fn(pc, experts[size_t(pc.expert)], p, first[size_t(pc.expert) + 1] - p);
      }
    });
  };
  run_pieces(I, [&](const Piece& pc, const Expert& ex, int64_t p, int64_t n) {
    const cpu::Q8Block* q = xq.empty() ? nullptr : xq.data() + p * (H / 32);
    ctx.kernels.matmul(ex.gate.dtype, xs.data() + p * H, q, n, H, ex.gate.data, pc.r0, pc.r1, gate.data() + p * I, I);
    ctx.kernels.matmul(ex.up.dtype, xs.data() + p * H, q, n, H, ex.up.data, pc.r0, pc.r1, up.data() + p * I, I);
  });
  // gpt-oss: biases, then its clamped SwiGLU.
  const Expert& kind = experts.front();
  auto add_bias = [&](std::vector<float>& rows, int64_t width, Tensor Expert::*bias) {
    if ((kind.*bias).empty()) return;
    ctx.pool.parallel_for(P, 4, [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p) {
        const float* b = (experts[size_t(expert_of[size_t(p)])].*bias).as<float>();
        for (int64_t i = 0; i < width; ++i) rows[size_t(p * width + i)] += b[i];
      }
    });
  };
  add_bias(gate, I, &Expert::gate_bias);
  add_bias(up, I, &Expert::up_bias);
  ctx.pool.parallel_for(P, 4, [&](int64_t p0, int64_t p1) {
    if (kind.swiglu_limit > 0)
      clamped_swiglu_rows(gate.data() + p0 * I, up.data() + p0 * I, gate.data() + p0 * I, (p1 - p0) * I, kind.swiglu_alpha,
                          kind.swiglu_limit);
    else
      ctx.kernels.silu_mul(gate.data() + p0 * I, up.data() + p0 * I, gate.data() + p0 * I, (p1 - p0) * I);
  });

  // down, in pieces of its output rows.
  const std::vector<cpu::Q8Block> aq = quantized_rows(ctx, experts.front().down.dtype, gate.data(), P, I);
  run_pieces(H, [&](const Piece& pc, const Expert& ex, int64_t p, int64_t n) {
    const cpu::Q8Block* q = aq.empty() ? nullptr : aq.data() + p * (I / 32);
    ctx.kernels.matmul(ex.down.dtype, gate.data() + p * I, q, n, I, ex.down.data, pc.r0, pc.r1, ys.data() + p * H, H);
  });
  add_bias(ys, H, &Expert::down_bias);

  // Each token's weighted sum, its choices in ascending expert order (routes keep them so).
  ctx.pool.parallel_for(T, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = out.as<float>() + t * H;
      std::fill(o, o + H, 0.0f);
      for (int64_t j = 0; j < k; ++j)
        ctx.kernels.axpy(routes.weight[size_t(t * k + j)], ys.data() + slot[size_t(t * k + j)] * H, o, H);
    }
  });
}

void expert_mlp(Context& ctx, const Tensor& x, const Expert& e, Tensor& out) {
  const int64_t T = x.dim(0), I = e.gate.dim(0);
  auto bias = [](const Tensor& b) { return b.empty() ? nullptr : &b; };
  Tensor gate = zeros(x.device, {T, I}), up = zeros(x.device, {T, I});
  linear(ctx, x, e.gate, bias(e.gate_bias), gate);
  linear(ctx, x, e.up, bias(e.up_bias), up);
  if (e.swiglu_limit > 0) clamped_swiglu(ctx, gate, up, gate, e.swiglu_alpha, e.swiglu_limit);
  else silu_mul(ctx, gate, up, gate);
  linear(ctx, gate, e.down, bias(e.down_bias), out);
}

}  // namespace ftllm::ops
