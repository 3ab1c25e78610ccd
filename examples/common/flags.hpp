// How the example programs (the numbered examples, add_mul_div, trainer, ctr) read their flags:
// with psflow::Flags, the library's parser (--help, --name=value, TF's cluster flags through
// add_task_flags). A bad command line exits 2 after saying what was wrong.
// Not thread-safe; call from main().
#pragma once

#include <cstdio>
#include <cstdlib>
#include <psflow/psflow.hpp>
#include <string>
#include <vector>

namespace example {

// Says what was wrong with the command line of `program` and exits 2.
[[noreturn]] inline void fail(const std::string& program, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", program.c_str(), why.c_str());
  std::exit(2);
}

// flags.parse(args); a bad command line exits 2 (--help prints the flags and exits 0).
inline void parse_or_exit(psflow::Flags& flags, const std::vector<std::string>& args) {
  try {
    const char* tf_config = std::getenv("TF_CONFIG");
    if (!flags.parse(args, tf_config ? std::optional<std::string_view>(tf_config) : std::nullopt)) {
      std::fputs(flags.help().c_str(), stdout);
      std::exit(0);
    }
  } catch (const psflow::InvalidArgument& e) {
    fail(args.empty() ? "example" : args[0], e.message());
  }
}
inline void parse_or_exit(psflow::Flags& flags, int argc, char** argv) {
  parse_or_exit(flags, std::vector<std::string>(argv, argv + argc));
}

}  // namespace example
