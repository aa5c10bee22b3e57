#include "net/tls.h"

#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <algorithm>
#include <climits>
#include <cstring>

namespace wccl::net {

std::string openssl_errors() {
  std::string out;
  unsigned long e;
  while ((e = ERR_get_error()) != 0) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    const char *reason = ERR_reason_error_string(e);
    out += reason != nullptr ? reason : buf;
  }
  return out.empty() ? "no OpenSSL reason recorded" : out;
}

Result<std::shared_ptr<TlsContext>> TlsContext::create(const Config &cfg) {
  const std::string &cert = cfg.str("tls_cert");
  const std::string &key = cfg.str("tls_key");
  const std::string &ca = cfg.str("tls_ca");
  for (const auto &[name, value] :
       {std::pair{"tls_cert", &cert}, {"tls_key", &key}, {"tls_ca", &ca}}) {
    if (value->empty()) {
      return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                        "tls=on needs config key %s (a PEM file; see docs/tls.md), or set tls=off",
                        name);
    }
  }
  ERR_clear_error();
  SSL_CTX *ctx = SSL_CTX_new(TLS_method());
  if (ctx == nullptr)
    return WCCL_ERROR(WCCL_ERR_NO_MEMORY, "SSL_CTX_new: %s", openssl_errors().c_str());
  std::shared_ptr<TlsContext> out(new TlsContext(ctx));
  SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(ctx, TLS1_3_VERSION);
  // AES-128-GCM first: the fastest AEAD on CPUs with AES instructions, and 128-bit security.
  SSL_CTX_set_ciphersuites(
      ctx, "TLS_AES_128_GCM_SHA256:TLS_AES_256_GCM_SHA384:TLS_CHACHA20_POLY1305_SHA256");
  SSL_CTX_set_num_tickets(ctx, 0);  // no session resumption: every link authenticates in full
  SSL_CTX_set_mode(ctx, SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  // Records are read one at a time, never past the one asked for: after the hello's record the
  // connection carries sealed frames, which the engine must leave unread (net/seal.h).
  SSL_CTX_set_read_ahead(ctx, 0);
  SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "tls_cert \"%s\": cannot load certificate: %s",
                      cert.c_str(), openssl_errors().c_str());
  }
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "tls_key \"%s\": cannot load private key: %s",
                      key.c_str(), openssl_errors().c_str());
  }
  if (SSL_CTX_check_private_key(ctx) != 1) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT,
                      "tls_key \"%s\" does not match tls_cert \"%s\": %s", key.c_str(),
                      cert.c_str(), openssl_errors().c_str());
  }
  if (SSL_CTX_load_verify_locations(ctx, ca.c_str(), nullptr) != 1) {
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "tls_ca \"%s\": cannot load CA certificate: %s",
                      ca.c_str(), openssl_errors().c_str());
  }
  return out;
}

TlsContext::~TlsContext() { SSL_CTX_free(ctx_); }

// The BIO pair of a TlsEngine: reads come from the ciphertext the stream lent, writes append to
// the engine's output buffer. Both BIOs point at the engine (BIO_get_data).
struct EngineBio {
  static int read(BIO *b, char *buf, int len) {
    auto *e = static_cast<TlsEngine *>(BIO_get_data(b));
    BIO_clear_retry_flags(b);
    if (e->in_left_ == 0) {
      BIO_set_retry_read(b);
      return -1;
    }
    const size_t n = std::min(static_cast<size_t>(len), e->in_left_);
    std::memcpy(buf, e->in_, n);
    e->in_ += n;
    e->in_left_ -= n;
    return static_cast<int>(n);
  }
  static int write(BIO *b, const char *buf, int len) {
    auto *e = static_cast<TlsEngine *>(BIO_get_data(b));
    BIO_clear_retry_flags(b);
    const auto *bytes = reinterpret_cast<const uint8_t *>(buf);  // same element type: one memmove
    e->out_.insert(e->out_.end(), bytes, bytes + len);
    return len;
  }
  static long ctrl(BIO *b, int cmd, long, void *) {
    auto *e = static_cast<TlsEngine *>(BIO_get_data(b));
    switch (cmd) {
      case BIO_CTRL_FLUSH:
        return 1;
      case BIO_CTRL_PENDING:
        return static_cast<long>(e->in_left_);
      case BIO_CTRL_WPENDING:
        return static_cast<long>(e->out_.size());
      default:
        return 0;
    }
  }
  static int create(BIO *b) {
    BIO_set_init(b, 1);
    return 1;
  }
  static const BIO_METHOD *method() {
    static const BIO_METHOD *m = [] {
      BIO_METHOD *bm = BIO_meth_new(BIO_get_new_index() | BIO_TYPE_SOURCE_SINK, "wccl stream");
      if (bm == nullptr) return static_cast<BIO_METHOD *>(nullptr);
      BIO_meth_set_read(bm, &EngineBio::read);
      BIO_meth_set_write(bm, &EngineBio::write);
      BIO_meth_set_ctrl(bm, &EngineBio::ctrl);
      BIO_meth_set_create(bm, &EngineBio::create);
      return bm;
    }();
    return m;
  }
};

Result<std::unique_ptr<TlsEngine>> TlsEngine::create(const TlsContext &context, bool is_server) {
  std::unique_ptr<TlsEngine> e(new TlsEngine());
  e->ssl_ = SSL_new(context.ctx());
  const BIO_METHOD *method = EngineBio::method();
  BIO *rbio = method != nullptr ? BIO_new(method) : nullptr;
  BIO *wbio = method != nullptr ? BIO_new(method) : nullptr;
  if (e->ssl_ == nullptr || rbio == nullptr || wbio == nullptr) {
    BIO_free(rbio);
    BIO_free(wbio);
    return WCCL_ERROR(WCCL_ERR_NO_MEMORY, "cannot create a TLS session: %s",
                      openssl_errors().c_str());
  }
  BIO_set_data(rbio, e.get());
  BIO_set_data(wbio, e.get());
  SSL_set_bio(e->ssl_, rbio, wbio);  // the session owns both BIOs from here
  if (is_server) {
    SSL_set_accept_state(e->ssl_);
  } else {
    SSL_set_connect_state(e->ssl_);
  }
  return e;
}

TlsEngine::~TlsEngine() { SSL_free(ssl_); }

Status TlsEngine::error_status(wccl_result_t code, const char *what, int ret) {
  const int err = SSL_get_error(ssl_, ret);
  std::string reason = openssl_errors();
  const long verify = SSL_get_verify_result(ssl_);
  if (verify != X509_V_OK) {
    reason += format(" (peer certificate: %s)", X509_verify_cert_error_string(verify));
  }
  if (err == SSL_ERROR_ZERO_RETURN) reason = "peer closed the TLS session";
  return WCCL_ERROR(code, "TLS %s failed: %s", what, reason.c_str());
}

Result<bool> TlsEngine::handshake() {
  if (handshake_done_) return true;
  ERR_clear_error();
  const int r = SSL_do_handshake(ssl_);
  if (r == 1) {
    handshake_done_ = true;
    return true;
  }
  const int err = SSL_get_error(ssl_, r);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return false;
  return error_status(WCCL_ERR_AUTH, "handshake", r);
}

Result<size_t> TlsEngine::read(uint8_t *dst, size_t max) {
  ERR_clear_error();
  const int want = max > (1u << 30) ? (1 << 30) : static_cast<int>(max);
  const int r = SSL_read(ssl_, dst, want);
  if (r > 0) return static_cast<size_t>(r);
  const int err = SSL_get_error(ssl_, r);
  if (err == SSL_ERROR_WANT_READ || err == SSL_ERROR_WANT_WRITE) return size_t{0};
  if (err == SSL_ERROR_ZERO_RETURN) return WCCL_ERROR(WCCL_ERR_IO, "peer closed the TLS session");
  return error_status(WCCL_ERR_PROTOCOL, "read", r);
}

Status TlsEngine::write(const uint8_t *src, size_t n) {
  ERR_clear_error();
  // Room for the records (16 KiB of data, 22 bytes of header, type and tag each) up front, so the
  // output buffer is written once and never moved.
  out_.reserve(out_.size() + n + (n / 16384 + 1) * 22);
  while (n > 0) {
    const int chunk = n > (1u << 30) ? (1 << 30) : static_cast<int>(n);
    const int r = SSL_write(ssl_, src, chunk);
    if (r <= 0) return error_status(WCCL_ERR_PROTOCOL, "write", r);
    src += r;
    n -= static_cast<size_t>(r);
  }
  return Status();
}

std::vector<uint8_t> TlsEngine::take() {
  std::vector<uint8_t> out;
  out.swap(out_);
  return out;
}

bool TlsEngine::holds_input() const { return SSL_pending(ssl_) != 0 || SSL_has_pending(ssl_) != 0; }

Status TlsEngine::export_secret(const char *label, uint8_t *out, size_t n) {
  ERR_clear_error();
  if (!handshake_done_ || SSL_export_keying_material(ssl_, out, n, label, std::strlen(label),
                                                     nullptr, 0, /*use_context=*/0) != 1) {
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "TLS exporter for \"%s\" failed: %s", label,
                      openssl_errors().c_str());
  }
  return Status();
}

std::string TlsEngine::peer_subject() const {
  X509 *cert = SSL_get0_peer_certificate(ssl_);
  if (cert == nullptr) return "";
  char buf[256];
  X509_NAME_oneline(X509_get_subject_name(cert), buf, sizeof(buf));
  return buf;
}

}  // namespace wccl::net
