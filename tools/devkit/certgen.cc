#include "devkit/certgen.h"

#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/rand.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <unistd.h>

#include <openssl/err.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <stdexcept>

namespace devkit {
namespace {

struct PkeyFree {
  void operator()(EVP_PKEY *p) const { EVP_PKEY_free(p); }
};
struct X509Free {
  void operator()(X509 *x) const { X509_free(x); }
};
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;

[[noreturn]] void fail(const char *what) {
  std::string message = std::string("certgen: ") + what;
  char buf[256];
  for (unsigned long e = ERR_get_error(); e != 0; e = ERR_get_error()) {
    ERR_error_string_n(e, buf, sizeof(buf));
    message += std::string(": ") + buf;
  }
  throw std::runtime_error(message);
}

void add_ext(X509 *cert, X509 *issuer, int nid, const char *value) {
  X509V3_CTX ctx;
  X509V3_set_ctx_nodb(&ctx);
  X509V3_set_ctx(&ctx, issuer, cert, nullptr, nullptr, 0);
  X509_EXTENSION *ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
  if (ext == nullptr) fail("extension");
  X509_add_ext(cert, ext, -1);
  X509_EXTENSION_free(ext);
}

X509Ptr make_cert(EVP_PKEY *key, const std::string &name, X509 *issuer, EVP_PKEY *issuer_key,
                  int not_before_days, int not_after_days, bool is_ca) {
  X509Ptr cert(X509_new());
  if (!cert) fail("X509_new");
  X509_set_version(cert.get(), 2);
  uint8_t serial[16];
  RAND_bytes(serial, sizeof(serial));
  serial[0] &= 0x7f;
  BIGNUM *bn = BN_bin2bn(serial, sizeof(serial), nullptr);
  BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(cert.get()));
  BN_free(bn);
  X509_gmtime_adj(X509_getm_notBefore(cert.get()), static_cast<long>(not_before_days) * 86400);
  X509_gmtime_adj(X509_getm_notAfter(cert.get()), static_cast<long>(not_after_days) * 86400);
  X509_NAME *subject = X509_get_subject_name(cert.get());
  X509_NAME_add_entry_by_txt(subject, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char *>(name.c_str()), -1, -1, 0);
  X509 *signer = issuer != nullptr ? issuer : cert.get();
  X509_set_issuer_name(cert.get(), X509_get_subject_name(signer));
  X509_set_pubkey(cert.get(), key);
  add_ext(cert.get(), signer, NID_basic_constraints,
          is_ca ? "critical,CA:TRUE" : "critical,CA:FALSE");
  add_ext(cert.get(), signer, NID_key_usage,
          is_ca ? "critical,keyCertSign,cRLSign" : "critical,digitalSignature");
  if (!is_ca) add_ext(cert.get(), signer, NID_ext_key_usage, "serverAuth,clientAuth");
  add_ext(cert.get(), signer, NID_subject_key_identifier, "hash");
  if (X509_sign(cert.get(), issuer_key != nullptr ? issuer_key : key, EVP_sha256()) == 0)
    fail("X509_sign");
  return cert;
}

void write_pem(const std::string &path, X509 *cert, EVP_PKEY *key) {
  FILE *f = std::fopen(path.c_str(), "w");
  if (f == nullptr) throw std::runtime_error("certgen: cannot write " + path);
  const bool ok = cert != nullptr
                      ? PEM_write_X509(f, cert) == 1
                      : PEM_write_PrivateKey(f, key, nullptr, nullptr, 0, nullptr, nullptr) == 1;
  std::fclose(f);
  if (!ok) fail("PEM write");
}

}  // namespace

struct Authority::Impl {
  PkeyPtr key;
  X509Ptr cert;
};

Authority::~Authority() = default;

Authority::Authority(const std::string &dir, const std::string &name)
    : impl_(std::make_unique<Impl>()), dir_(dir) {
  impl_->key.reset(EVP_EC_gen("P-256"));
  if (!impl_->key) fail("EVP_EC_gen");
  impl_->cert = make_cert(impl_->key.get(), name, nullptr, nullptr, -1, 3650, true);
  ca_path_ = dir + "/" + name + "-ca.pem";
  write_pem(ca_path_, impl_->cert.get(), nullptr);
}

NodeFiles Authority::issue(const std::string &name, int not_before_days, int not_after_days) {
  PkeyPtr key(EVP_EC_gen("P-256"));
  if (!key) fail("EVP_EC_gen");
  X509Ptr cert = make_cert(key.get(), name, impl_->cert.get(), impl_->key.get(), not_before_days,
                           not_after_days, false);
  NodeFiles files{dir_ + "/" + name + ".pem", dir_ + "/" + name + ".key", ca_path_};
  write_pem(files.cert, cert.get(), nullptr);
  write_pem(files.key, nullptr, key.get());
  return files;
}

TempDir::TempDir(const std::string &prefix) {
  const char *base = std::getenv("TMPDIR");  // NOLINT(concurrency-mt-unsafe): read-only use
  std::string templ =
      std::string(base != nullptr && *base != '\0' ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  if (mkdtemp(templ.data()) == nullptr)
    throw std::runtime_error("cannot create a temporary directory " + templ);
  path_ = templ;
}

TempDir::~TempDir() {
  std::error_code ignored;
  std::filesystem::remove_all(path_, ignored);
}

}  // namespace devkit
