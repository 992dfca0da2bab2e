#include "text_generation.h"

#include <memory>
#include <mutex>

#include "../text/choice_text.h"
#include "../text/prompt.h"

namespace ftllm {

namespace {

// A choice's text state and its id, shared by the submitting thread and the worker's callbacks: a stop
// string may appear before submit() has returned the id to cancel by.
struct Choice {
  text::ChoiceText text;
  std::mutex mu;
  uint64_t id = 0;
  bool stop_wanted = false, stop_sent = false;
};

}  // namespace

StartedText start_text_generation(ModelInstance& m, const TextRequest& request, TextCallback callback) {
  StartedText started;
  text::Prompt prompt = text::build_prompt(m.text(), m.options().name, m.context_length(), request);
  if (prompt.refusal != Refusal::None) {
    started.refusal = prompt.refusal;
    started.error = prompt.error;
    started.param = prompt.param;
    return started;
  }
  started.prompt_tokens = prompt.ids.size();
  GenerationRequest generation = request.generation;
  if (generation.max_tokens <= 0) generation.max_tokens = int32_t(m.context_length() - int64_t(prompt.ids.size()));
  generation.prompt = std::move(prompt.ids);
  auto shared_callback = std::make_shared<TextCallback>(std::move(callback));
  Runner& runner = m.runner();
  for (int i = 0; i < request.n; ++i) {
    GenerationRequest g = generation;
    // Each choice samples on its own: seed + index keeps a seeded request reproducible.
    if (g.sampling.seed) *g.sampling.seed += uint64_t(i);
    auto choice = std::make_shared<Choice>(text::ChoiceText(m.text().tokenizer.get(), size_t(i), prompt.format, request.stop,
                                                             generation.logprobs >= 0));
    const uint64_t id = runner.submit(std::move(g), [choice, shared_callback, &runner](const GenerationEvent& e) {
      (*shared_callback)(choice->text.on(e));
      if (e.finished || !choice->text.stopped()) return;
      std::lock_guard lock(choice->mu);
      if (choice->stop_sent) return;
      choice->stop_sent = choice->id != 0;
      if (choice->id) runner.cancel(choice->id);  // a stop string ends generation at once
      else choice->stop_wanted = true;
    });
    std::lock_guard lock(choice->mu);
    choice->id = id;
    if (choice->stop_wanted) runner.cancel(id);
    started.choice_ids.push_back(id);
  }
  return started;
}

}  // namespace ftllm
