#include "spm_model.h"

#include <cstdio>
#include <queue>
#include <string>

#include "utf8.h"

namespace ftllm::tokenizer {

void SpmModel::encode(std::string_view text, std::vector<int32_t>& out) const {
  struct Symbol {
    size_t begin, len;
    int32_t prev, next;
  };
  std::vector<Symbol> sym;
  for (size_t i = 0; i < text.size();) {
    size_t start = i;
    next_codepoint(text, i);
    sym.push_back({start, i - start, int32_t(sym.size()) - 1, -1});
    if (sym.size() > 1) sym[sym.size() - 2].next = int32_t(sym.size() - 1);
  }
  struct Candidate {
    float score;
    int32_t left, right;
    size_t len;
    bool operator<(const Candidate& o) const { return score != o.score ? score < o.score : left > o.left; }
  };
  std::priority_queue<Candidate> heap;
  auto consider = [&](int32_t l) {
    if (l < 0 || sym[size_t(l)].next < 0) return;
    const Symbol& a = sym[size_t(l)];
    const Symbol& b = sym[size_t(a.next)];
    int32_t id = vocab_.find(text.substr(a.begin, a.len + b.len));
    if (id >= 0) heap.push({scores_[size_t(id)], l, a.next, a.len + b.len});
  };
  for (size_t i = 0; i + 1 < sym.size(); ++i) consider(int32_t(i));
  while (!heap.empty()) {
    Candidate c = heap.top();
    heap.pop();
    Symbol& a = sym[size_t(c.left)];
    Symbol& b = sym[size_t(c.right)];
    if (a.len == 0 || b.len == 0 || a.len + b.len != c.len || a.next != c.right) continue;  // stale
    a.len += b.len;
    b.len = 0;
    a.next = b.next;
    if (b.next >= 0) sym[size_t(b.next)].prev = c.left;
    consider(a.prev);
    consider(c.left);
  }
  for (int32_t i = sym.empty() ? -1 : 0; i >= 0; i = sym[size_t(i)].next) {
    const Symbol& s = sym[size_t(i)];
    std::string_view piece = text.substr(s.begin, s.len);
    if (int32_t id = vocab_.find(piece); id >= 0) {
      out.push_back(id);
      continue;
    }
    for (unsigned char c : piece) {
      char name[8];
      std::snprintf(name, sizeof name, "<0x%02X>", c);
      int32_t b = vocab_.find(name);
      out.push_back(b >= 0 ? b : unk_id_);
    }
  }
}

}  // namespace ftllm::tokenizer
