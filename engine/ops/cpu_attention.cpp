// Flash attention on the CPU. The step's tokens are cut into tiles (a few consecutive tokens of one
// sequence); a tile's query heads meet each block of keys together (kernels' attend_block, which reads
// the block's cache rows once, whole and in order, for every head), keeping a running softmax, so no
// score matrix is ever written out. A context longer than one segment may be split over threads, each
// segment's partial result merged afterwards in position order; when even that leaves threads idle,
// the heads are split too.
//
// The promise that batching never changes a token's bits: blocks and segments are counted from
// position 0, a row's arithmetic does not depend on the rows beside it, and partial results merge in
// segment order whether one thread made them all or each came from another (the same merge either
// way). So a token's attention depends on its own position and keys, never on the step around it.
#include "cpu_attention.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "../cpu/kernels.h"
#include "../cpu/thread_pool.h"

namespace ftllm::ops {

namespace {

// Keys per block of the online softmax and per segment (the part of a long context one thread takes,
// flash-decoding), both counted from position 0, and both the model's constants (never the step's: a
// token's bits may not depend on what else the step holds). A block is as many keys, up to 256, as keep
// its key and value rows of every head within 128 KB (a quarter of a Zen 3 core's L2): each block costs a
// softmax step's max and rescale per row and the kernel's setup. Against fixed sizes by head length
// (128 keys up to 64 values, 32 up to 128, 16 beyond), one layer's 8k-key decode on 2 threads of Zen 5
// took, for 14/2 heads of 64 values (Qwen2.5-0.5B) 0.121 -> 0.113 ms, for 4/1 of 256 values (gemma-3-1b)
// 0.186 -> 0.125 ms, its prefill slices 30% less; 8 key-value heads of 128 values keep their 32.
int64_t block_keys(int64_t kv_heads, int64_t head_bytes) {
  const int64_t key_bytes = 2 * kv_heads * head_bytes;  // a key's and its value's rows, every head
  int64_t keys = 256;
  while (keys > 16 && keys * key_bytes > (128 << 10)) keys /= 2;
  return keys;
}
constexpr int64_t kSegmentKeys = 512;

constexpr int64_t kTileRows = 32;  // query rows per tile, about: tokens x heads sharing a KV head

// Tokens [t0, t1) of one sequence.
struct Tile {
  int64_t t0, t1;
  int64_t first, last;  // the positions any of its tokens sees
};

// Key-value heads [kv0, kv1) and of each the query heads g0 <= g < g1 of those sharing it (head
// kvh * group + g). Its rows for a tile: by key-value head, then token, then query head.
struct HeadGroup {
  int64_t kv0, kv1, g0, g1;
  int64_t rows(int64_t tokens) const { return (kv1 - kv0) * tokens * (g1 - g0); }
  // Row r's token (from the tile's first) and query head.
  std::pair<int64_t, int64_t> token_and_head(int64_t r, int64_t tokens, int64_t group) const {
    const int64_t per_head = tokens * (g1 - g0), kvh = kv0 + r / per_head, rest = r % per_head;
    return {rest / (g1 - g0), kvh * group + g0 + rest % (g1 - g0)};
  }
};

// A tile's head group over segments [s0, s1). `partial` >= 0: the item is one segment of a tile split
// over threads and leaves its state there for the merge.
struct Item {
  int64_t tile;
  HeadGroup g;
  int64_t s0, s1;
  int64_t partial = -1;
};

// Rows' running softmax: max, sum and unnormalised output (width floats each).
struct State {
  std::vector<float> m, l, acc;
  void reset(int64_t rows, int64_t width) {
    m.assign(size_t(rows), -INFINITY);
    l.assign(size_t(rows), 0.0f);
    acc.assign(size_t(rows * width), 0.0f);
  }
};

// Folds segment b's state of one row into a's (a comes first in position order). The one merge used
// by a thread that made both and by the merge of results from different threads. The rows go through
// the kernel table's rescale_add: ops/ is built for baseline x86-64, where std::fma is a libm call per
// value (~3% of an 8k-key decode's attention, on one thread while the other waited).
void merge_row(const cpu::Kernels& k, float& m, float& l, float* acc, float bm, float bl, const float* bacc, int64_t width) {
  if (bm == -INFINITY) return;
  if (m == -INFINITY) {
    m = bm;
    l = bl;
    std::copy(bacc, bacc + width, acc);
    return;
  }
  const float top = std::max(m, bm), x = std::exp(m - top), y = std::exp(bm - top);
  l = std::fma(bl, y, l * x);
  k.rescale_add(acc, x, bacc, y, width);
  m = top;
}

// A split tile's head group: its segments are `items` items, in position order from first_item, one
// every head group (the plan puts a segment's head groups side by side).
struct Merge {
  int64_t tile;
  HeadGroup g;
  int64_t first_item, items;
};

struct Plan {
  std::vector<Tile> tiles;
  std::vector<Item> items;
  std::vector<Merge> merges;
  int64_t partial_rows = 0;
};

}  // namespace

void cpu_paged_attention(Context& ctx, const Tensor& q, const AttentionBatch& b, const KvLayer& kv, const AttentionShape& sh,
                         Tensor& out) {
  const int64_t T = q.dim(0), d = sh.head_dim, group = sh.heads / sh.kv_heads;
  const int64_t vd = sh.value_dim ? sh.value_dim : d, width = (vd + 7) / 8 * 8;
  const int64_t head_bytes = kvcache::kv_head_bytes(kv.dtype, d), KB = block_keys(sh.kv_heads, head_bytes), SK = kSegmentKeys;
  auto first_of = [&](int64_t p) { return sh.window > 0 ? std::max<int64_t>(0, p - sh.window + 1) : int64_t(0); };

  Plan plan;
  const int64_t tile_tokens = std::max<int64_t>(1, kTileRows / group);
  for (int64_t t = 0; t < T;) {
    Tile tile{t, t + 1, first_of(b.pos[size_t(t)]), b.pos[size_t(t)]};
    while (tile.t1 < T && tile.t1 - t < tile_tokens && b.seq[size_t(tile.t1)] == b.seq[size_t(t)]) {
      tile.first = std::min(tile.first, first_of(b.pos[size_t(tile.t1)]));
      tile.last = std::max(tile.last, b.pos[size_t(tile.t1)]);
      ++tile.t1;
    }
    plan.tiles.push_back(tile);
    t = tile.t1;
  }
  // Enough work for every thread that runs jobs now (two items each: more measured slower, each item a
  // fixed cost; a pool adapting to a busy machine may run fewer than its size, see ThreadPool): whole
  // tiles when there are plenty, else segments (their partial results merged after), and heads split
  // too when even that is short: key-value heads apart, then the query heads sharing one. An item of
  // every head reads each cache row once, whole and in order (per head, a row's parts are a stride
  // apart: 3-4x slower from memory); a split's items of one segment lie side by side, so the threads,
  // taking items in order, still read each row from memory once.
  const int64_t want = 2 * ctx.pool.active();
  const bool split = int64_t(plan.tiles.size()) < want;
  int64_t segment_items = 0;
  for (const Tile& tile : plan.tiles) segment_items += tile.last / SK - tile.first / SK + 1;
  std::vector<HeadGroup> head_groups;
  if (!split || segment_items >= want) {
    head_groups.push_back({0, sh.kv_heads, 0, group});
  } else {
    const int64_t parts = std::clamp<int64_t>((want + segment_items * sh.kv_heads - 1) / (segment_items * sh.kv_heads), 1, group);
    const int64_t per_part = (group + parts - 1) / parts;
    for (int64_t kvh = 0; kvh < sh.kv_heads; ++kvh)
      for (int64_t g0 = 0; g0 < group; g0 += per_part) head_groups.push_back({kvh, kvh + 1, g0, std::min(g0 + per_part, group)});
  }
  const int64_t stride = int64_t(head_groups.size());  // items from one segment of a split tile to the next
  // Costly items first (later tiles see more keys), so the last ones to run are short.
  for (int64_t i = int64_t(plan.tiles.size()) - 1; i >= 0; --i) {
    const Tile& tile = plan.tiles[size_t(i)];
    const int64_t s0 = tile.first / SK, s1 = tile.last / SK + 1, tokens = tile.t1 - tile.t0;
    if (!split || s1 - s0 == 1) {
      for (const HeadGroup& g : head_groups) plan.items.push_back({i, g, s0, s1});
      continue;
    }
    for (int64_t x = 0; x < stride; ++x) plan.merges.push_back({i, head_groups[size_t(x)], int64_t(plan.items.size()) + x, s1 - s0});
    for (int64_t s = s0; s < s1; ++s)
      for (const HeadGroup& g : head_groups) {
        plan.items.push_back({i, g, s, s + 1, plan.partial_rows});
        plan.partial_rows += g.rows(tokens);
      }
  }
  std::vector<float> partial_m(size_t(plan.partial_rows)), partial_l(size_t(plan.partial_rows));
  std::vector<float> partial_acc(size_t(plan.partial_rows * width));

  const cpu::Kernels& k = ctx.kernels;
  const float* qf = q.as<float>();
  const float* sinks = sh.sinks ? sh.sinks->as<float>() : nullptr;
  auto write_row = [&, of = out.as<float>()](int64_t t, int64_t h, const float* acc, float m, float l) {
    float scale = 1.0f;
    if (sinks) {  // the sink's e^(s - m) joins the sum, all rescaled to the larger of the two maxima
      const float top = std::max(m, sinks[h]);
      scale = std::exp(m - top);
      l = std::fma(l, scale, std::exp(sinks[h] - top));
    }
    const float inv = scale / l;
    float* o = of + (t * sh.heads + h) * vd;
    for (int64_t x = 0; x < vd; ++x) o[x] = acc[x] * inv;
  };
  ctx.pool.parallel_for(int64_t(plan.items.size()), 1, [&](int64_t i0, int64_t i1) {
    State seg, whole;
    std::vector<const float*> qrows;
    std::vector<int32_t> lo, hi;
    std::vector<int64_t> token;  // each row's token in the step
    std::vector<const uint8_t*> keys(static_cast<size_t>(KB)), values(static_cast<size_t>(KB));
    std::vector<const uint8_t*> next_keys(static_cast<size_t>(KB)), next_values(static_cast<size_t>(KB));
    for (int64_t it = i0; it < i1; ++it) {
      const Item& item = plan.items[size_t(it)];
      const Tile& tile = plan.tiles[size_t(item.tile)];
      const int64_t tokens = tile.t1 - tile.t0, rows = item.g.rows(tokens);
      qrows.resize(size_t(rows));
      token.resize(size_t(rows));
      lo.resize(size_t(rows));
      hi.resize(size_t(rows));
      for (int64_t r = 0; r < rows; ++r) {
        const auto [t, h] = item.g.token_and_head(r, tokens, group);
        token[size_t(r)] = tile.t0 + t;
        qrows[size_t(r)] = qf + ((tile.t0 + t) * sh.heads + h) * d;
      }
      const int32_t* table = b.block_table.data() + b.table_start[size_t(b.seq[size_t(tile.t0)])];
      const bool complete = item.partial < 0;
      const int64_t item_end = std::min(item.s1 * SK, tile.last + 1);
      if (complete) whole.reset(rows, width);
      // Block bs's rows (from the tile's first position) into key_rows and value_rows, a page's run at a
      // time (one division and table lookup a page, not a row); returns the block's keys.
      auto rows_of = [&](int64_t bs, std::vector<const uint8_t*>& key_rows, std::vector<const uint8_t*>& value_rows) {
        const int64_t n = std::min(KB, tile.last + 1 - bs);
        for (int64_t j = std::max<int64_t>(0, tile.first - bs); j < n;) {
          const int64_t page = (bs + j) / sh.block_tokens, slot = bs + j - page * sh.block_tokens;
          const int64_t run_end = std::min(n, j + sh.block_tokens - slot);
          int64_t at = int64_t(table[page]) * kv.block_bytes + slot * kv.row_bytes + item.g.kv0 * head_bytes;
          for (; j < run_end; ++j, at += kv.row_bytes) {
            key_rows[size_t(j)] = kv.keys + at;
            value_rows[size_t(j)] = kv.values + at;
          }
        }
        return n;
      };
      int64_t held = -1;  // the block whose rows keys and values hold (filled as the block ahead)
      for (int64_t s = item.s0; s < item.s1; ++s) {
        seg.reset(rows, width);
        const int64_t from = std::max(s * SK, tile.first), to = std::min((s + 1) * SK, tile.last + 1);
        if (from < to && held != from / KB * KB) rows_of(from / KB * KB, keys, values);
        for (int64_t bs = from / KB * KB; bs < to; bs += KB) {
          const int64_t n = std::min(KB, tile.last + 1 - bs);
          // The next block this item reads (also across its segments), asked for while this one is read.
          const int64_t ahead = bs + KB < item_end ? rows_of(bs + KB, next_keys, next_values) : 0;
          for (int64_t r = 0; r < rows; ++r) {
            const int64_t p = b.pos[size_t(token[size_t(r)])];
            lo[size_t(r)] = int32_t(std::clamp<int64_t>(first_of(p) - bs, 0, n));
            hi[size_t(r)] = int32_t(std::clamp<int64_t>(p + 1 - bs, 0, n));
          }
          const cpu::AttendBlock block{keys.data(), values.data(), kv.dtype, n, d, vd, sh.scale, sh.softcap,
                                       item.g.kv1 - item.g.kv0, head_bytes, next_keys.data(), next_values.data(), ahead};
          k.attend_block(block, {qrows.data(), rows, lo.data(), hi.data(), seg.m.data(), seg.l.data(), seg.acc.data(), width});
          keys.swap(next_keys);
          values.swap(next_values);
          held = ahead ? bs + KB : -1;
        }
        if (!complete) {
          std::copy(seg.m.begin(), seg.m.end(), partial_m.begin() + item.partial);
          std::copy(seg.l.begin(), seg.l.end(), partial_l.begin() + item.partial);
          std::copy(seg.acc.begin(), seg.acc.end(), partial_acc.begin() + item.partial * width);
          continue;
        }
        for (int64_t r = 0; r < rows; ++r)
          merge_row(k, whole.m[size_t(r)], whole.l[size_t(r)], whole.acc.data() + r * width, seg.m[size_t(r)], seg.l[size_t(r)],
                    seg.acc.data() + r * width, width);
      }
      if (!complete) continue;
      for (int64_t r = 0; r < rows; ++r) {
        const auto [t, h] = item.g.token_and_head(r, tokens, group);
        write_row(tile.t0 + t, h, whole.acc.data() + r * width, whole.m[size_t(r)], whole.l[size_t(r)]);
      }
    }
  });
  if (plan.partial_rows == 0) return;

  // The split tiles: each row's segments merged in position order.
  ctx.pool.parallel_for(int64_t(plan.merges.size()), 1, [&](int64_t i0, int64_t i1) {
    std::vector<float> acc(static_cast<size_t>(width));
    for (int64_t i = i0; i < i1; ++i) {
      const Merge& mg = plan.merges[size_t(i)];
      const Tile& tile = plan.tiles[size_t(mg.tile)];
      const int64_t tokens = tile.t1 - tile.t0, rows = mg.g.rows(tokens);
      for (int64_t r = 0; r < rows; ++r) {
        float m = -INFINITY, l = 0;
        for (int64_t it = mg.first_item; it < mg.first_item + mg.items * stride; it += stride) {
          const int64_t at = plan.items[size_t(it)].partial + r;
          merge_row(k, m, l, acc.data(), partial_m[size_t(at)], partial_l[size_t(at)], partial_acc.data() + at * width, width);
        }
        const auto [t, h] = mg.g.token_and_head(r, tokens, group);
        write_row(tile.t0 + t, h, acc.data(), m, l);
      }
    }
  });
}

}  // namespace ftllm::ops
