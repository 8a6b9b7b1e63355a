// src/util owns cross-cutting helpers: errors, logging, atomic file writes, progress.
#pragma once
#include <stdexcept>
#include <string>

namespace llmrun {

// A mistake by the user (bad flag, recipe, path, file). The CLI prints it as one
// "error:" line and exits with code 2. Everything else that escapes is exit code 1.
class UserError : public std::runtime_error {
 public:
  explicit UserError(const std::string& what) : std::runtime_error(what) {}
};

// Internal invariant broken: a bug in llmrun, not in the input.
#define LLMRUN_CHECK(cond, msg)                                                              \
  do {                                                                                       \
    if (!(cond))                                                                             \
      throw std::logic_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + \
                             (msg));                                                         \
  } while (0)

}  // namespace llmrun
