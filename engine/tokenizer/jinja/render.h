// Rendering a parsed template with a context of variables, as jinja2's ImmutableSandboxedEnvironment
// does for Hugging Face chat templates (trim_blocks, lstrip_blocks, loop controls, tojson as
// transformers defines it, raise_exception and strftime_now).
#pragma once

#include <ctime>
#include <memory>
#include <string>

#include "ast.h"

namespace ftllm::jinja {

// What one render may use. Templates come from model files and a runaway one (an endless loop, recursion
// without end, a string multiplied by a billion) must fail with a TemplateError rather than take the
// daemon's memory, stack or time. Real chat templates use a tiny fraction of these.
struct RenderLimits {
  size_t max_output_bytes = size_t(1) << 28;  // the rendered prompt, and any one string built on the way
  uint64_t max_work = 200'000'000;            // expressions and statements run, plus bytes built / 16
  int max_depth = 200;                        // nested expressions, statements and macro calls
};

struct RenderOptions {
  std::time_t now = 0;  // strftime_now's clock; 0 means the current time
  RenderLimits limits;
};

// For builtins, during a render: count work and check a size about to be built against the limits
// (TemplateError past them). Outside a render they check nothing.
void charge_work(uint64_t units);
void check_size(size_t bytes);
// A namespace made by this render: emptied when the render ends, since one can hold itself (directly or
// through a macro's caller) and reference counting alone would never free it.
void own_namespace(const std::shared_ptr<Object>& attributes);

// Throws TemplateError naming the template line and the reason.
std::string render(const Template& t, const Object& context, const RenderOptions& options = {});

}  // namespace ftllm::jinja
