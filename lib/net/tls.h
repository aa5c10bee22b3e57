// TLS 1.3 as a decorator that does no I/O: the caller (a Stream, which owns the libuv socket)
// lends it ciphertext to read in place and takes the ciphertext it produces. Two small BIOs do
// this without the extra copy that OpenSSL's memory BIOs would make on each side. Mutual
// authentication: both ends present a certificate that must chain to the configured CA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"

using SSL_CTX = struct ssl_ctx_st;
using SSL = struct ssl_st;
using BIO = struct bio_st;

namespace wccl::net {

// The certificate, key and CA of one node (an SSL_CTX). Immutable after creation; shared by all
// streams of a transport.
class TlsContext {
 public:
  // Loads tls_cert, tls_key and tls_ca from cfg. INVALID_ARGUMENT names the key and file that is
  // missing or unreadable, with OpenSSL's reason.
  static Result<std::shared_ptr<TlsContext>> create(const Config &cfg);
  ~TlsContext();
  TlsContext(const TlsContext &) = delete;
  TlsContext &operator=(const TlsContext &) = delete;

  SSL_CTX *ctx() const { return ctx_; }

 private:
  explicit TlsContext(SSL_CTX *ctx) : ctx_(ctx) {}
  SSL_CTX *ctx_;
};

// One TLS session. Not thread-safe: used only on its stream's loop thread.
class TlsEngine {
 public:
  // NO_MEMORY if OpenSSL cannot allocate the session.
  static Result<std::unique_ptr<TlsEngine>> create(const TlsContext &context, bool is_server);
  ~TlsEngine();
  TlsEngine(const TlsEngine &) = delete;
  TlsEngine &operator=(const TlsEngine &) = delete;

  // Lends the engine ciphertext read from the socket. It reads from there in place until the
  // next set_input; input_left() says how much it has not consumed yet.
  void set_input(const uint8_t *data, size_t n) {
    in_ = data;
    in_left_ = n;
  }
  size_t input_left() const { return in_left_; }
  // Advances the handshake. Returns true once it is complete, false while it needs more
  // ciphertext, AUTH with OpenSSL's reason (and the certificate verdict) when it fails.
  Result<bool> handshake();
  bool handshake_done() const { return handshake_done_; }
  // Decrypts up to max bytes into dst. Returns the count, 0 when more ciphertext is needed, IO
  // when the peer closed the session, PROTOCOL (with OpenSSL's reason) for a bad record or alert.
  Result<size_t> read(uint8_t *dst, size_t max);
  // Encrypts all n bytes (buffered as ciphertext).
  Status write(const uint8_t *src, size_t n);
  // Ciphertext waiting to be sent, and taking it (the engine starts a new buffer).
  size_t pending() const { return out_.size(); }
  std::vector<uint8_t> take();
  // Bytes read from the input that the engine still holds (decrypted or not): none once a record
  // has been read whole, with read-ahead off.
  bool holds_input() const;
  // The TLS exporter (RFC 8446 §7.5): n bytes for `label`, no context, once the handshake is done.
  Status export_secret(const char *label, uint8_t *out, size_t n);
  // The peer certificate's subject, for logs ("" before the handshake).
  std::string peer_subject() const;

 private:
  friend struct EngineBio;
  TlsEngine() = default;
  Status error_status(wccl_result_t code, const char *what, int ret);

  SSL *ssl_ = nullptr;
  bool handshake_done_ = false;
  const uint8_t *in_ = nullptr;  // lent ciphertext not yet consumed
  size_t in_left_ = 0;
  std::vector<uint8_t> out_;  // ciphertext produced, not yet taken
};

// Drains OpenSSL's thread-local error queue into one "reason; reason" string.
std::string openssl_errors();

}  // namespace wccl::net
