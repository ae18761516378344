// Engine-internal access to a loaded Engine's parts, for code inside the library that
// drives the models itself (the server's Scheduler). Not part of the public API.
#pragma once
#include <mutex>

#include "engine/forward.hpp"
#include "engine/tokenizer.hpp"
#include "tandem/engine.hpp"

namespace tandem {

struct EngineParts {
  Transformer& target;
  const Tokenizer& tokenizer;
  Transformer* draft;  // null without a draft model
  int32_t context;
  std::mutex& mu;      // held by whoever runs the models (Engine::generate or a Scheduler)
};

struct EngineAccess {
  static EngineParts parts(Engine& e);
};

}  // namespace tandem
