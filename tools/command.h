#pragma once
// The lazytensor command's subcommands: each adds itself and its options to the CLI11 app, and
// says what it runs when chosen (main.cpp lists them).
#include <CLI/CLI.hpp>
#include <functional>

namespace lt::tools {

struct Command {
  CLI::App* app;             // the subcommand: true once chosen
  std::function<int()> run;  // runs it with the options parsed; the exit status
};

}  // namespace lt::tools
