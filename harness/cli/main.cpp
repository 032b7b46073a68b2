// ampcheck — command-line entry point. With no subcommand it runs the default suite on the best device
// (the GPU when there is one, else the CPU) and ends with a result table. The command line itself: cli/app.h.
#include "cli/app.h"

#include <iostream>

int main(int argc, char** argv) {
  ampcheck::cli::CommandLine cl;
  const int parsed = cl.parse(argc, argv, std::cout, std::cerr);
  if (parsed >= 0) return parsed;
  return cl.run(std::cerr);
}
