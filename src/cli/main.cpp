// src/cli owns the llmrun executable: argument parsing (CLI11) and one file per subcommand.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "util/error.h"

int main(int argc, char** argv) {
  CLI::App app{"llmrun: train and serve GPT-2 and Llama models"};
  app.set_version_flag("--version", std::string("llmrun ") + LLMRUN_VERSION);
  app.require_subcommand(1);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    int rc = app.exit(e);
    return rc == 0 ? 0 : 2;
  }
  return 0;
}
