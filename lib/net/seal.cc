#include "net/seal.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include <climits>
#include <cstring>

#include "net/tls.h"

namespace wccl::net {
namespace {

constexpr char kClientLabel[] = "EXPORTER-wccl frames client";
constexpr char kServerLabel[] = "EXPORTER-wccl frames server";

// HMAC-SHA256(secret, label) into out[32].
bool derive(const uint8_t secret[FrameSeal::kSecretBytes], const char *label, uint8_t out[32]) {
  unsigned len = 0;
  return HMAC(EVP_sha256(), secret, FrameSeal::kSecretBytes,
              reinterpret_cast<const unsigned char *>(label), std::strlen(label), out,
              &len) != nullptr &&
         len == 32;
}

}  // namespace

Result<std::unique_ptr<FrameSeal>> FrameSeal::from_tls(TlsEngine &tls, bool is_client) {
  uint8_t client[kSecretBytes], server[kSecretBytes];
  Status st = tls.export_secret(kClientLabel, client, sizeof(client));
  if (st.ok()) st = tls.export_secret(kServerLabel, server, sizeof(server));
  Result<std::unique_ptr<FrameSeal>> seal = !st.ok()    ? Result<std::unique_ptr<FrameSeal>>(st)
                                            : is_client ? create(client, server)
                                                        : create(server, client);
  OPENSSL_cleanse(client, sizeof(client));
  OPENSSL_cleanse(server, sizeof(server));
  return seal;
}

Result<std::unique_ptr<FrameSeal>> FrameSeal::create(const uint8_t send_secret[kSecretBytes],
                                                     const uint8_t recv_secret[kSecretBytes],
                                                     uint64_t rekey_bytes) {
  std::unique_ptr<FrameSeal> s(new FrameSeal());
  s->rekey_bytes_ = rekey_bytes;
  s->send_.ctx = EVP_CIPHER_CTX_new();
  s->recv_.ctx = EVP_CIPHER_CTX_new();
  if (s->send_.ctx == nullptr || s->recv_.ctx == nullptr) {
    return WCCL_ERROR(WCCL_ERR_NO_MEMORY, "cannot create the frame ciphers: %s",
                      openssl_errors().c_str());
  }
  WCCL_RETURN_IF_ERROR(s->start(s->send_, send_secret, true));
  WCCL_RETURN_IF_ERROR(s->start(s->recv_, recv_secret, false));
  return s;
}

FrameSeal::~FrameSeal() {
  EVP_CIPHER_CTX_free(send_.ctx);  // which cleanses the key schedule
  EVP_CIPHER_CTX_free(recv_.ctx);
  OPENSSL_cleanse(send_.secret, sizeof(send_.secret));
  OPENSSL_cleanse(recv_.secret, sizeof(recv_.secret));
}

// Takes secret as the direction's current one: its key into the cipher, its iv, counts from 0.
Status FrameSeal::start(Direction &d, const uint8_t secret[kSecretBytes], bool encrypt) {
  std::memmove(d.secret, secret, kSecretBytes);
  uint8_t key[32], iv[32];
  if (!derive(d.secret, "key", key) || !derive(d.secret, "iv", iv)) {
    OPENSSL_cleanse(key, sizeof(key));
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "deriving the frame keys failed: %s",
                      openssl_errors().c_str());
  }
  std::memcpy(d.iv, iv, sizeof(d.iv));
  d.frames = 0;
  d.bytes = 0;
  const int ok = encrypt ? EVP_EncryptInit_ex(d.ctx, EVP_aes_128_gcm(), nullptr, key, nullptr)
                         : EVP_DecryptInit_ex(d.ctx, EVP_aes_128_gcm(), nullptr, key, nullptr);
  OPENSSL_cleanse(key, sizeof(key));
  if (ok != 1)
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "AES-128-GCM set-up failed: %s", openssl_errors().c_str());
  return Status();
}

// The nonce of the direction's next frame: its iv XOR the frames sealed under its key so far.
void FrameSeal::nonce(const Direction &d, uint8_t out[12]) {
  std::memcpy(out, d.iv, 12);
  for (int i = 0; i < 8; ++i) out[11 - i] ^= static_cast<uint8_t>(d.frames >> (8 * i));
}

// Counts a frame of n bytes the direction sealed or opened; past the bound, the next key.
Status FrameSeal::advance(Direction &d, size_t n, bool encrypt) {
  ++d.frames;
  d.bytes += n;
  if (d.bytes < rekey_bytes_) return Status();
  uint8_t next[kSecretBytes];
  if (!derive(d.secret, "next", next)) {
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "deriving the next frame key failed: %s",
                      openssl_errors().c_str());
  }
  Status st = start(d, next, encrypt);
  OPENSSL_cleanse(next, sizeof(next));
  return st;
}

Status FrameSeal::seal(const uint8_t *aad, size_t aad_len, const uint8_t *in, size_t n,
                       uint8_t *out, uint8_t *tag) {
  if (n > INT_MAX || aad_len > INT_MAX)
    return WCCL_ERROR(WCCL_ERR_INVALID_ARGUMENT, "a frame of %zu bytes is too long to seal", n);
  uint8_t iv[12];
  nonce(send_, iv);
  int len = 0;
  const bool ok =
      EVP_EncryptInit_ex(send_.ctx, nullptr, nullptr, nullptr, iv) == 1 &&
      EVP_EncryptUpdate(send_.ctx, nullptr, &len, aad, static_cast<int>(aad_len)) == 1 &&
      (n == 0 || EVP_EncryptUpdate(send_.ctx, out, &len, in, static_cast<int>(n)) == 1) &&
      EVP_EncryptFinal_ex(send_.ctx, out + n, &len) == 1 &&
      EVP_CIPHER_CTX_ctrl(send_.ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), tag) == 1;
  if (!ok)
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "sealing a frame failed: %s", openssl_errors().c_str());
  return advance(send_, n, true);
}

Status FrameSeal::open(const uint8_t *aad, size_t aad_len, uint8_t *data, size_t n,
                       const uint8_t *tag) {
  if (n > INT_MAX || aad_len > INT_MAX)
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "a sealed frame of %zu bytes is too long", n);
  uint8_t iv[12];
  nonce(recv_, iv);
  int len = 0;
  uint8_t expected[kTagBytes];
  std::memcpy(expected, tag, kTagBytes);
  const bool set =
      EVP_DecryptInit_ex(recv_.ctx, nullptr, nullptr, nullptr, iv) == 1 &&
      EVP_DecryptUpdate(recv_.ctx, nullptr, &len, aad, static_cast<int>(aad_len)) == 1 &&
      (n == 0 || EVP_DecryptUpdate(recv_.ctx, data, &len, data, static_cast<int>(n)) == 1) &&
      EVP_CIPHER_CTX_ctrl(recv_.ctx, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), expected) ==
          1;
  if (!set)
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "opening a frame failed: %s", openssl_errors().c_str());
  if (EVP_DecryptFinal_ex(recv_.ctx, data + n, &len) != 1) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                      "a sealed frame did not authenticate (changed, replayed, dropped or "
                      "reordered on the way)");
  }
  return advance(recv_, n, false);
}

}  // namespace wccl::net
