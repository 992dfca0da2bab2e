// Rendering a parsed template with a context of variables, as jinja2's ImmutableSandboxedEnvironment
// does for Hugging Face chat templates (trim_blocks, lstrip_blocks, loop controls, tojson as
// transformers defines it, raise_exception and strftime_now).
#pragma once

#include <ctime>
#include <string>

#include "ast.h"

namespace ftllm::jinja {

struct RenderOptions {
  std::time_t now = 0;  // strftime_now's clock; 0 means the current time
};

// Throws TemplateError naming the template line and the reason.
std::string render(const Template& t, const Object& context, const RenderOptions& options = {});

}  // namespace ftllm::jinja
