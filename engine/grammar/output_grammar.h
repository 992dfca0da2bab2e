// Constrained decoding: a request's output constraint (a JSON schema, any JSON object, a GBNF grammar)
// compiled against one model's vocabulary into the TokenGrammar its scheduler follows. The grammar engine
// is xgrammar's C++ core (subprojects/xgrammar.wrap); this is the only file that sees it.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../scheduler/request.h"
#include "../text/text_request.h"
#include "../tokenizer/tokenizer.h"

namespace ftllm::grammar {

// One model's compiler. Thread-safe; compiled grammars are cached by their text, so a schema sent again
// costs nothing.
class GrammarCompiler {
 public:
  // The vocabulary as the bytes each token decodes to (special tokens can never be produced, except
  // `stop_ids`, allowed once the output is complete); `vocab_size` is the logits' width (>= the
  // tokenizer's: the rows past it belong to no token). The special tokens among `dialect`'s markers are
  // written as their text (enforced tool calls are made of them).
  GrammarCompiler(const tokenizer::Tokenizer& tokenizer, int64_t vocab_size, const std::vector<int32_t>& stop_ids,
                  text::ToolDialect dialect = text::ToolDialect::None);
  ~GrammarCompiler();

  // The grammar for `constraint`, or null with `error` saying what in it cannot be enforced.
  std::shared_ptr<const TokenGrammar> compile(const OutputConstraint& constraint, std::string& error) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace ftllm::grammar
