// Cache blocking for the matmul kernels: a tile of weight rows stays in L2 while a tile of activation
// rows stays in L1, so neither is streamed from further out once per row of the other (prefill).
// Activation rows go in fours, then singles, exactly as without tiles, so every output is summed the
// same way whatever the batch.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

namespace ftllm::cpu {

// four(m, n): activation rows m..m+3 against weight row n; across(m, n): row m against weight rows
// n..n+3 (where the kernel has it: independent sums in flight together); one(m, n): row m alone.
template <typename Four, typename Across, typename One>
inline void for_each_tile(int64_t M, int64_t n0, int64_t n1, size_t x_row_bytes, size_t w_row_bytes, Four&& four,
                          Across&& across, One&& one) {
  const int64_t n_tile = std::max<int64_t>(4, int64_t((256 << 10) / std::max<size_t>(w_row_bytes, 1)) / 4 * 4);
  const int64_t m_tile = std::max<int64_t>(4, int64_t((16 << 10) / std::max<size_t>(x_row_bytes, 1)) / 4 * 4);
  const int64_t m_fours = M / 4 * 4;
  for (int64_t nt = n0; nt < n1; nt += n_tile) {
    const int64_t nt_end = std::min(n1, nt + n_tile);
    for (int64_t mt = 0; mt < M; mt += m_tile) {
      const int64_t mt_end = std::min(M, mt + m_tile), fours_end = std::min(mt_end, m_fours);
      for (int64_t n = nt; n < nt_end; ++n)
        for (int64_t m = mt; m + 4 <= fours_end; m += 4) four(m, n);
      for (int64_t m = std::max(mt, fours_end); m < mt_end; ++m) {
        int64_t n = nt;
        for (; n + 4 <= nt_end; n += 4) across(m, n);
        for (; n < nt_end; ++n) one(m, n);
      }
    }
  }
}

template <typename Four, typename One>
inline void for_each_tile(int64_t M, int64_t n0, int64_t n1, size_t x_row_bytes, size_t w_row_bytes, Four&& four,
                          One&& one) {
  auto across = [&](int64_t m, int64_t n) {
    for (int64_t i = 0; i < 4; ++i) one(m, n + i);
  };
  for_each_tile(M, n0, n1, x_row_bytes, w_row_bytes, four, across, one);
}

// The float GEMMs' blocking: weight rows in tiles that stay in L2 while every group of up to R activation
// rows passes over them, each group meeting the tile's weights up to W rows at a time (a register tile).
// tile(m, r, n, w): activation rows m..m+r-1 against weight rows n..n+w-1, r <= R, w <= W.
template <int R, int W, typename Tile>
inline void for_each_register_tile(int64_t M, int64_t n0, int64_t n1, size_t w_row_bytes, Tile&& tile) {
  const int64_t n_tile = std::max<int64_t>(W, int64_t((256 << 10) / std::max<size_t>(w_row_bytes, 1)) / W * W);
  for (int64_t nt = n0; nt < n1; nt += n_tile) {
    const int64_t nt_end = std::min(n1, nt + n_tile);
    for (int64_t m = 0; m < M; m += R)
      for (int64_t n = nt; n < nt_end; n += W) tile(m, int(std::min<int64_t>(R, M - m)), n, int(std::min<int64_t>(W, nt_end - n)));
  }
}

// Decode's float GEMV: one weight row after another, one sequential stream that the hardware prefetchers
// follow (F16 0.5B decode on one Zen 4 thread, 21 tok/s reading four rows side by side: 27 one at a time
// with AVX-512, 28 with the AVX2 table), while each row asks for the one `ahead_rows` on (into L2). row(n, ahead):
// weight row n, and the byte distance to prefetch at (0: none, this thread's rows end first).
template <typename Row>
inline void for_each_weight_row(int64_t n0, int64_t n1, size_t w_row_bytes, int64_t ahead_rows, Row&& row) {
  for (int64_t n = n0; n < n1; ++n) row(n, n + ahead_rows < n1 ? size_t(ahead_rows) * w_row_bytes : 0);
}

}  // namespace ftllm::cpu
