// Sealed data frames: how a TLS link protects its data once the connection is authenticated
// (docs/protocol.md, "Sealed frames"; docs/tls.md says why).
//
// The TLS 1.3 handshake (mutual certificates) and the hellos run as TLS records. After its hello,
// each side sends data frames as header + AES-128-GCM ciphertext of the payload + 16-byte tag,
// with the header as additional data, under keys exported from the connection's TLS session
// (RFC 8446 §7.5), one per direction. A frame is then sealed straight from the sender's buffer into
// the bytes the socket writes, and opened in place in the receiver's buffer, which the kernel
// fills directly: one AES-GCM pass per byte on each side and no copy, where TLS records cost
// three copies besides (OpenSSL's record buffers on both sides).
//
// Keys. Per direction, secret_0 = the TLS exporter with label "EXPORTER-wccl frames client" (the
// connecting side's direction) or "... server", no context, 32 bytes. From secret_i:
// key = HMAC-SHA256(secret_i, "key")[0..16), iv = HMAC-SHA256(secret_i, "iv")[0..12). The k-th
// frame under a key (from 0) has the nonce iv XOR k (big-endian, in the last 8 bytes). Once a
// direction has sealed rekey_bytes of payload under a key, the frame that crosses the bound is
// the last under it, and both ends move on to secret_{i+1} = HMAC-SHA256(secret_i, "next"):
// frames on one connection are sealed and opened in the same order, so the two ends agree
// without a message, and no key encrypts more than rekey_bytes + one frame.
//
// A frame that does not open (a changed byte anywhere: header, payload or tag; a frame replayed,
// dropped or reordered, which shifts every nonce after it) is PROTOCOL: the stream fails its link.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/status.h"

using EVP_CIPHER_CTX = struct evp_cipher_ctx_st;

namespace wccl::net {

class TlsEngine;

class FrameSeal {
 public:
  static constexpr size_t kTagBytes = 16;
  static constexpr size_t kSecretBytes = 32;
  static constexpr uint64_t kRekeyBytes = uint64_t{1} << 34;  // 16 GiB per key and direction

  // The seal of one connection's TLS session: is_client says which direction this end sends on.
  static Result<std::unique_ptr<FrameSeal>> from_tls(TlsEngine &tls, bool is_client);
  // From the two directions' first secrets (tests; from_tls uses it).
  static Result<std::unique_ptr<FrameSeal>> create(const uint8_t send_secret[kSecretBytes],
                                                   const uint8_t recv_secret[kSecretBytes],
                                                   uint64_t rekey_bytes = kRekeyBytes);
  ~FrameSeal();
  FrameSeal(const FrameSeal &) = delete;
  FrameSeal &operator=(const FrameSeal &) = delete;

  // Seals the next frame this end sends: out = the ciphertext of in[0..n) (out may equal in),
  // tag = its kTagBytes tag, with aad (the frame's header) authenticated alongside.
  Status seal(const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t n, uint8_t *out,
              uint8_t *tag);
  // Opens the next frame this end receives, in place: data[0..n) is the ciphertext before and the
  // payload after. PROTOCOL if it does not authenticate (data then holds nothing of use).
  Status open(const uint8_t *aad, size_t aad_len, uint8_t *data, size_t n, const uint8_t *tag);

 private:
  struct Direction {
    EVP_CIPHER_CTX *ctx = nullptr;
    uint8_t secret[kSecretBytes] = {};
    uint8_t iv[12] = {};
    uint64_t frames = 0;  // under the current key
    uint64_t bytes = 0;   // of payload under the current key
  };
  FrameSeal() = default;
  Status start(Direction &d, const uint8_t secret[kSecretBytes], bool encrypt);
  static void nonce(const Direction &d, uint8_t out[12]);
  Status advance(Direction &d, size_t n, bool encrypt);

  Direction send_, recv_;
  uint64_t rekey_bytes_ = kRekeyBytes;
};

}  // namespace wccl::net
