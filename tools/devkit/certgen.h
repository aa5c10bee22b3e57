// Throwaway X.509 material for tests, benchmarks and local demos: a CA and node certificates
// signed by it (ECDSA P-256), written as PEM files into a private temporary directory.
// Not part of libwccl (production deployments make certificates as docs/tls.md describes), and
// built on OpenSSL alone, so that wccl-perf can use it and still link nothing of wccl's but
// libwccl.so. Failures throw std::runtime_error naming the cause.
#pragma once

#include <memory>
#include <string>

namespace devkit {

struct NodeFiles {
  std::string cert;  // PEM certificate
  std::string key;   // PEM private key
  std::string ca;    // PEM CA certificate to verify peers with
};

class Authority {
 public:
  // Creates a CA named `name` with its files in dir.
  Authority(const std::string &dir, const std::string &name);
  ~Authority();
  Authority(const Authority &) = delete;
  Authority &operator=(const Authority &) = delete;

  // Issues a certificate for `name`, valid from now + not_before_days to now + not_after_days
  // (negative values lie in the past: -2, -1 gives an expired certificate).
  NodeFiles issue(const std::string &name, int not_before_days = -1, int not_after_days = 30);
  const std::string &ca_path() const { return ca_path_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  std::string dir_;
  std::string ca_path_;
};

// A fresh private directory under $TMPDIR (or /tmp), removed with everything in it when the
// object is destroyed.
class TempDir {
 public:
  explicit TempDir(const std::string &prefix);
  ~TempDir();
  TempDir(const TempDir &) = delete;
  TempDir &operator=(const TempDir &) = delete;
  const std::string &path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace devkit
