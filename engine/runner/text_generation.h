// A TextRequest run on a resident model: its prompts built from the model's text side, one sequence per
// choice queued on the runner (all in the same batch), each choice's tokens turned into text on the worker thread, and a choice
// cancelled as soon as a stop string appears in it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../text/prompt.h"
#include "../text/text_request.h"
#include "model_instance.h"

namespace ftllm {

struct StartedText {
  Refusal refusal = Refusal::None;
  std::string error, param;
  std::vector<uint64_t> choice_ids;
  size_t prompt_tokens = 0;
};

// Every prompt of `request` rendered and tokenized for `model` (the work that grows with the request's
// size, thread-safe), or why one cannot be.
struct BuiltPrompts {
  std::vector<text::Prompt> prompts;
  std::shared_ptr<const TokenGrammar> grammar;  // the request's output constraint, compiled
  Refusal refusal = Refusal::None;
  std::string error, param;
};
BuiltPrompts build_prompts(const ModelInstance& model, const TextRequest& request);

// Queues one sequence per choice of the built prompts (a request is refused whole or runs whole).
// `adapter`, when given, is the LoRA adapter every choice runs with.
StartedText start_text_generation(ModelInstance& model, const TextRequest& request, const BuiltPrompts& built,
                                  TextCallback callback, std::shared_ptr<const model::LoraAdapter> adapter = nullptr);

}  // namespace ftllm
