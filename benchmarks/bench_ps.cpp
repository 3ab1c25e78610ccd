// bench_ps: the ps task of the network benchmarks. A plain psflow ps (like tests/psflow_task)
// that also links the training kernels, binds whatever port its cluster spec gives (0: the OS
// picks one) and prints "PORT <port>" so the benchmark never guesses a free port; when told to
// stop it prints "PEAK_RSS <bytes>" (its VmHWM) and exits 0.
//   bench_ps --ps_hosts=127.0.0.1:0 --worker_hosts=127.0.0.1:0 --job_name=ps --task_index=0
#include <cstdio>
#include <iostream>
#include <psflow/psflow.hpp>
#if __has_include(<psflow/runtime/kernels/training_kernels.hpp>)
#include <psflow/runtime/kernels/training_kernels.hpp>
#endif

#include "bench_support.hpp"

int main(int argc, char** argv) {
  psflow::bench::die_with_parent();
  try {
    const auto flags = psflow::TaskFlags::parse(argc, argv);
    psflow::ServerOptions options;
    options.log = false;
    options.checkpoint_dir = flags.checkpoint_dir;  // bench_checkpoint: its own shard directory
    options.tls_cert_file = flags.tls_cert;         // bench_tls: --tls_cert, --tls_key, --tls_ca
    options.tls_key_file = flags.tls_key;
    options.tls_ca_file = flags.tls_ca;
    psflow::Server server(flags.cluster, flags.job_name, flags.task_index, options);
    const std::string target = server.target();
    std::printf("PORT %s\n", target.substr(target.rfind(':') + 1).c_str());
    std::fflush(stdout);
    server.join();
    // The memory benchmark reads this process's peak resident set from here.
    std::printf("PEAK_RSS %lld\n", psflow::bench::peak_rss_bytes());
    std::fflush(stdout);
    return 0;
  } catch (const psflow::Error& e) {
    std::cerr << "bench_ps: " << e.what() << "\n";
    return 1;
  }
}
