// The chat prompt moved to the API layer (engine/api/chat_prompt.hpp) so the C API can
// apply the same template; the server and `tandem chat` keep using it under this name.
#pragma once
#include "engine/api/chat_prompt.hpp"

namespace tandem::server {
using ::tandem::ChatPrompt;
}  // namespace tandem::server
