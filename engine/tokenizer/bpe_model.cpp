#include "bpe_model.h"

#include <cstdio>
#include <queue>

#include "utf8.h"

namespace ftllm::tokenizer {

bool BpeModel::add_merge(std::string_view left, std::string_view right) {
  int32_t a = vocab_.find(left), b = vocab_.find(right);
  std::string joined(left);
  joined += right;
  int32_t r = vocab_.find(joined);
  if (a < 0 || b < 0 || r < 0) return false;
  merges_.emplace(key(a, b), Merge{int32_t(merges_.size()), r});
  return true;
}

void BpeModel::encode(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (options_.ignore_merges) {
    if (int32_t id = vocab_.find(word); id >= 0) return out.push_back(id);
  }
  // Initial symbols: one per character, or its bytes as <0xNN> when the character is no token.
  std::vector<int32_t> sym;
  for (size_t i = 0; i < word.size();) {
    size_t start = i;
    next_codepoint(word, i);
    std::string_view ch = word.substr(start, i - start);
    if (int32_t id = vocab_.find(ch); id >= 0) {
      sym.push_back(id);
    } else if (options_.byte_fallback) {
      for (unsigned char c : ch) {
        char name[8];
        std::snprintf(name, sizeof name, "<0x%02X>", c);
        if (int32_t b = vocab_.find(name); b >= 0) sym.push_back(b);
        else if (options_.unk_id >= 0) sym.push_back(options_.unk_id);
      }
    } else if (options_.unk_id >= 0) {
      if (!(options_.fuse_unk && !sym.empty() && sym.back() == options_.unk_id)) sym.push_back(options_.unk_id);
    }
  }

  // Merge lowest rank first (leftmost among equals) with a heap over a linked list of symbols.
  const size_t n = sym.size();
  std::vector<int32_t> prev(n), next(n);
  std::vector<bool> alive(n, true);
  for (size_t i = 0; i < n; ++i) {
    prev[i] = int32_t(i) - 1;
    next[i] = i + 1 < n ? int32_t(i + 1) : -1;
  }
  struct Candidate {
    int32_t rank, left, right, left_id, right_id;
    bool operator>(const Candidate& o) const { return rank != o.rank ? rank > o.rank : left > o.left; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>> heap;
  auto consider = [&](int32_t l) {
    if (l < 0 || next[size_t(l)] < 0) return;
    int32_t r = next[size_t(l)];
    auto it = merges_.find(key(sym[size_t(l)], sym[size_t(r)]));
    if (it != merges_.end()) heap.push({it->second.rank, l, r, sym[size_t(l)], sym[size_t(r)]});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(int32_t(i));
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    // Skip candidates made stale by earlier merges.
    if (!alive[size_t(c.left)] || !alive[size_t(c.right)] || next[size_t(c.left)] != c.right ||
        sym[size_t(c.left)] != c.left_id || sym[size_t(c.right)] != c.right_id)
      continue;
    sym[size_t(c.left)] = merges_.at(key(c.left_id, c.right_id)).result;
    alive[size_t(c.right)] = false;
    next[size_t(c.left)] = next[size_t(c.right)];
    if (next[size_t(c.right)] >= 0) prev[size_t(next[size_t(c.right)])] = c.left;
    consider(prev[size_t(c.left)]);
    consider(c.left);
  }
  for (size_t i = 0; i < n; ++i)
    if (alive[i]) out.push_back(sym[i]);
}

}  // namespace ftllm::tokenizer
