// Library log lines: one line on standard error, naming the task of the process once a Server
// has named it.
#include <unistd.h>

#include <catch2/catch.hpp>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "psflow/core/log.hpp"

namespace {

// Runs `write` with standard error sent to a temporary file; returns what it wrote.
template <class F>
std::string captured_stderr(F write) {
  char path[] = "/tmp/psflow-log-test-XXXXXX";
  const int file = mkstemp(path);
  REQUIRE(file >= 0);
  std::fflush(stderr);
  const int saved = dup(2);
  dup2(file, 2);
  write();
  std::fflush(stderr);
  dup2(saved, 2);
  close(saved);
  close(file);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::remove(path);
  return text.str();
}

}  // namespace

TEST_CASE("log lines name the process's task once the first Server named it") {
  CHECK(captured_stderr([] { psflow::log_line("before any server"); }) ==
        "[psflow] before any server\n");
  psflow::detail::set_log_task("/job:worker/replica:0/task:1");
  psflow::detail::set_log_task("/job:ps/replica:0/task:0");  // a second Server does not rename
  CHECK(captured_stderr([] { psflow::log_line("saved checkpoint /tmp/x/model.ckpt-200"); }) ==
        "[psflow /job:worker/replica:0/task:1] saved checkpoint /tmp/x/model.ckpt-200\n");
  CHECK(captured_stderr([] { psflow::detail::log_line_as("/job:ps/replica:0/task:0", "up"); }) ==
        "[psflow /job:ps/replica:0/task:0] up\n");
}
