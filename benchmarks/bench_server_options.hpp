// Benchmark support for the binaries that run a psflow Server (raw_peer, which links only
// Boost, includes bench_support.hpp but not this).
#pragma once

#include <chrono>

#include "psflow/distributed/server_options.hpp"

namespace psflow::bench {

// A benchmark worker's Server: silent, with deadlines no run here comes near; `step_timeout`
// bounds every run (a 256 MiB fetch takes about 1 s here).
inline ServerOptions quiet_server_options(
    std::chrono::seconds step_timeout = std::chrono::seconds(120)) {
  ServerOptions options;
  options.log = false;
  options.connect_timeout = std::chrono::seconds(30);
  options.step_timeout = step_timeout;
  return options;
}

}  // namespace psflow::bench
