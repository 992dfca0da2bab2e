// A TextRequest run on a resident model: its prompts built from the model's text side, one sequence per
// choice queued on the runner (all in the same batch), each choice's tokens turned into text on the worker thread, and a choice
// cancelled as soon as a stop string appears in it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "../text/text_request.h"
#include "model_instance.h"

namespace ftllm {

struct StartedText {
  Refusal refusal = Refusal::None;
  std::string error, param;
  std::vector<uint64_t> choice_ids;
  size_t prompt_tokens = 0;
};

StartedText start_text_generation(ModelInstance& model, const TextRequest& request, TextCallback callback);

}  // namespace ftllm
