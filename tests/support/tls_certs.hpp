// Test support: throwaway certificate authorities and task certificates for mutual TLS, made
// with the openssl command (each call bounded by `timeout`) in a directory the caller owns.
// EC P-256 keys: quick to make. The same commands as docs/security.md gives.
#pragma once

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <stdexcept>
#include <string>

#include "psflow/distributed/server_options.hpp"

namespace psflow::testing {

class TlsCerts {
 public:
  // Files go into `dir` (which must exist): <name>.pem, <name>.key.
  explicit TlsCerts(std::string dir) : dir_(std::move(dir)) {}

  // A self-signed CA called `name`.
  void make_ca(const std::string& name) {
    run("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 2 "
        "-subj /CN=" +
        name + " -keyout " + key(name) + " -out " + pem(name));
  }
  // A certificate for `name` signed by the CA `ca`.
  void make_cert(const std::string& name, const std::string& ca) {
    const std::string request = dir_ + "/" + name + ".csr";
    run("openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=" +
        name + " -keyout " + key(name) + " -out " + request);
    run("openssl x509 -req -days 2 -in " + request + " -CA " + pem(ca) + " -CAkey " + key(ca) +
        " -CAcreateserial -out " + pem(name));
  }

  std::string pem(const std::string& name) const { return dir_ + "/" + name + ".pem"; }
  std::string key(const std::string& name) const { return dir_ + "/" + name + ".key"; }

  // `options` with TLS on: `name`'s certificate and key, `ca` as the cluster's CA.
  ServerOptions with_tls(ServerOptions options, const std::string& name,
                         const std::string& ca) const {
    options.tls_cert_file = pem(name);
    options.tls_key_file = key(name);
    options.tls_ca_file = pem(ca);
    return options;
  }

 private:
  void run(const std::string& command) const {
    const std::string log = dir_ + "/openssl.log";
    std::string line = "timeout 30 ";
    line += command;
    line += " >" + log + " 2>&1";
    if (std::system(line.c_str()) == 0) return;
    std::ifstream in(log);
    const std::string output((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
    std::string message =
        "making test certificates failed (is the openssl command installed? "
        "scripts/setup.sh installs it): ";
    message += command;
    message += "\n" + output;
    throw std::runtime_error(message);
  }

  std::string dir_;
};

}  // namespace psflow::testing
