// Blocking for the matmul kernels: a tile of weight rows stays in L2 while every group of activation
// rows passes over it (prefill, batched decode); one activation row reads the weight rows in order (decode).
// Each output's sum is the kernel's alone, so the blocking never changes a bit.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ftllm::cpu {

// Many activation rows go through a matmul a block of at most this many bytes (as the kernel reads them:
// float rows, or quantized ones) at a time, so the block stays in a core's share of L3 while the weights
// pass over it; each block reads the weights again. On Zen 3 (32 MB of L3 for 8 cores) 512 rows of a
// 7B shape's down projection (K 18944) read as one block ran at 0.55-0.85x the speed of blocks of 2 MB.
constexpr int64_t kActivationBlockBytes = 2 << 20;

// The float GEMMs' weight tile: it and the next one, asked for while it is used, stay in a core's L2.
constexpr size_t kWeightTileBytes = 128 << 10;

// Activation rows [0, M) of `row_bytes` each in blocks of at most kActivationBlockBytes, every block a
// whole number of `unit` rows (the kernel's row group) and the blocks as even as that allows:
// block(m, rows) for rows m..m+rows-1.
template <typename Block>
inline void for_each_activation_block(int64_t M, int64_t row_bytes, int64_t unit, Block&& block) {
  const int64_t most = std::max<int64_t>(unit, kActivationBlockBytes / std::max<int64_t>(row_bytes, 1) / unit * unit);
  const int64_t blocks = (M + most - 1) / most, rows = ((M + blocks - 1) / blocks + unit - 1) / unit * unit;
  for (int64_t m = 0; m < M; m += rows) block(m, std::min(rows, M - m));
}

// Cache lines [begin, end) asked into L2 one at each call of step(), then the last one again: an even
// pace (two lines a step, or all at once, filled the queue of misses, and four activation rows ran no
// faster) and neither a branch nor a count in the register tile's inner loop (a loop over a count there
// spilled the tile's pointers: a 512-row prefill 6% slower).
class SpreadPrefetch {
 public:
  SpreadPrefetch() : SpreadPrefetch(nullptr, nullptr) {}
  SpreadPrefetch(const char* begin, const char* end)
      : next_(begin < end ? begin : kIdleLine), last_(begin < end ? std::max(begin, end - 64) : kIdleLine) {}
  [[gnu::always_inline]] void step() {
    __builtin_prefetch(next_, 0, 2);
    next_ = std::min(next_ + 64, last_);
  }

 private:
  alignas(64) static constexpr char kIdleLine[64] = {};  // asked for when there is nothing to ask: in L1
  const char* next_;
  const char* last_;
};

// The float GEMMs' blocking: weight rows in tiles that stay in L2 while every group of up to R activation
// rows passes over them, each group meeting the tile's weights up to W rows at a time (a register tile).
// tile(m, r, n, w, ahead, next): activation rows m..m+r-1 against weight rows n..n+w-1, r <= R, w <= W.
// ahead: where the weights come from memory (the first group on the first tile, or a lone group on every
// tile), the byte distance to the next register tile's rows, which the kernel asks for as it goes (only
// rows this thread reads; 0: none, from L2 that only costs loads). next: with several groups, the
// register tile's share of the next weight tile, to ask for a line a step of its K loop, so memory streams while
// the groups go over the tile in L2, not only during the first (batched decode has too few groups to
// hide a tile's wait behind: 0.5B F16 at 4 sequences decoded 20% faster with this, Zen 3).
template <int R, int W, typename Tile>
inline void for_each_register_tile(int64_t M, int64_t n0, int64_t n1, const void* w, size_t w_row_bytes, Tile&& tile) {
  const int64_t n_tile = std::max<int64_t>(W, int64_t(kWeightTileBytes / std::max<size_t>(w_row_bytes, 1)) / W * W);
  const char* const base = static_cast<const char*>(w);
  for (int64_t nt = n0; nt < n1; nt += n_tile) {
    const int64_t nt_end = std::min(n1, nt + n_tile);
    // The next tile's lines in even shares, one a register tile (worked out once a tile: with three
    // divisions a register tile as well, a 512-row prefill ran 23% slower).
    const char* next = base + size_t(nt_end) * w_row_bytes;
    const char* const next_end = M > R ? base + size_t(std::min(n1, nt_end + n_tile)) * w_row_bytes : next;
    const int64_t lines = (next_end - next + 63) / 64, calls = (M + R - 1) / R * ((nt_end - nt + W - 1) / W);
    const int64_t per_call = (lines + calls - 1) / calls;
    for (int64_t m = 0; m < M; m += R)
      for (int64_t n = nt; n < nt_end; n += W) {
        const char* const share_end = std::min(next + 64 * per_call, next_end);
        const int64_t count = std::min<int64_t>(W, nt_end - n);
        const bool cold = m == 0 && (nt == n0 || M <= R);
        tile(m, int(std::min<int64_t>(R, M - m)), n, int(count), cold && n + 2 * count <= n1 ? size_t(count) * w_row_bytes : 0,
             SpreadPrefetch(next, share_end));
        next = share_end;
      }
  }
}

// Decode's float GEMV: one weight row after another, one sequential stream that the hardware prefetchers
// follow (F16 0.5B decode on one Zen 4 thread, 21 tok/s reading four rows side by side: 27 one at a time
// with AVX-512, 28 with the AVX2 table when it kept two sums a row; with one sum a row it reads two rows
// side by side), while each row asks for the one `ahead_rows` on (into L2).
// row(n, ahead): weight row n, and the byte distance to prefetch at (0: none, this thread's rows end first).
template <typename Row>
inline void for_each_weight_row(int64_t n0, int64_t n1, size_t w_row_bytes, int64_t ahead_rows, Row&& row) {
  for (int64_t n = n0; n < n1; ++n) row(n, n + ahead_rows < n1 ? size_t(ahead_rows) * w_row_bytes : 0);
}

// The same W weight rows at a time, then the last ones alone: rows.template operator()<W or 1>(n, ahead).
template <int W, typename Rows>
inline void for_each_weight_rows(int64_t n0, int64_t n1, size_t w_row_bytes, int64_t ahead_rows, Rows&& rows) {
  int64_t n = n0;
  for (; n + W <= n1; n += W) rows.template operator()<W>(n, n + W + ahead_rows <= n1 ? size_t(ahead_rows) * w_row_bytes : 0);
  for (; n < n1; ++n) rows.template operator()<1>(n, size_t(0));
}

// Activation rows [0, M) in groups of G, then the rest as one group: group.template operator()<R>(m) for the
// group of R rows from row m.
template <int R, typename Group>
inline void row_group_of(int64_t m, int64_t rows, Group& group) {
  if constexpr (R > 1)
    if (rows < R) return row_group_of<R - 1>(m, rows, group);
  group.template operator()<R>(m);
}
template <int G, typename Group>
inline void for_each_row_group(int64_t M, Group&& group) {
  int64_t m = 0;
  for (; m + G <= M; m += G) group.template operator()<G>(m);
  if (m < M) row_group_of<G - 1>(m, M - m, group);
}

}  // namespace ftllm::cpu
