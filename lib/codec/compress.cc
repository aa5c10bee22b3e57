// Byte shuffle and zstd (level 1) for state sync; without zstd, compress() always declines.
#include "codec/compress.h"

#include <cstring>

#if WCCL_HAVE_ZSTD  // -D from lib/meson.build
#include <zstd.h>
#endif

namespace wccl::codec {

bool compression_available() { return WCCL_HAVE_ZSTD != 0; }

void shuffle(const uint8_t *in, size_t len, size_t es, uint8_t *out) {
  const size_t n = es == 0 ? 0 : len / es;
  for (size_t b = 0; b < es; ++b) {
    uint8_t *o = out + b * n;
    for (size_t i = 0; i < n; ++i) o[i] = in[i * es + b];
  }
  std::memcpy(out + n * es, in + n * es, len - n * es);
}

void unshuffle(const uint8_t *in, size_t len, size_t es, uint8_t *out) {
  const size_t n = es == 0 ? 0 : len / es;
  for (size_t b = 0; b < es; ++b) {
    const uint8_t *p = in + b * n;
    for (size_t i = 0; i < n; ++i) out[i * es + b] = p[i];
  }
  std::memcpy(out + n * es, in + n * es, len - n * es);
}

#if WCCL_HAVE_ZSTD

struct Compressor::Contexts {
  ZSTD_CCtx *c = ZSTD_createCCtx();
  ZSTD_DCtx *d = ZSTD_createDCtx();
  ~Contexts() {
    ZSTD_freeCCtx(c);
    ZSTD_freeDCtx(d);
  }
};

Compressor::Compressor() = default;
Compressor::~Compressor() = default;

size_t Compressor::compress(const void *src, size_t len, size_t es, void *dst, size_t cap) {
  if (len == 0) return 0;
  if (!z_) z_ = std::make_unique<Contexts>();
  if (z_->c == nullptr) return 0;
  shuffled_.resize(len);
  shuffle(static_cast<const uint8_t *>(src), len, es, shuffled_.data());
  const size_t n = ZSTD_compressCCtx(z_->c, dst, cap, shuffled_.data(), len, 1);
  // An error here is "dst too small" (the frame is no shorter than the input): send it as is.
  return ZSTD_isError(n) || n >= len ? 0 : n;
}

Status Compressor::decompress(const void *src, size_t n, size_t es, void *dst, size_t len) {
  if (!z_) z_ = std::make_unique<Contexts>();
  if (z_->d == nullptr) return WCCL_ERROR(WCCL_ERR_NO_MEMORY, "no memory for a zstd context");
  const unsigned long long content = ZSTD_getFrameContentSize(src, n);
  if (content != len) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "a compressed piece of %zu bytes %s, not %zu", n,
                      content == ZSTD_CONTENTSIZE_ERROR     ? "is not a zstd frame"
                      : content == ZSTD_CONTENTSIZE_UNKNOWN ? "does not record its size"
                                                            : "records another size",
                      len);
  }
  if (ZSTD_findFrameCompressedSize(src, n) != n) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                      "a compressed piece of %zu bytes is not exactly one zstd frame", n);
  }
  shuffled_.resize(len);
  const size_t got = ZSTD_decompressDCtx(z_->d, shuffled_.data(), len, src, n);
  if (ZSTD_isError(got) || got != len) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "a compressed piece does not decompress to %zu bytes: %s",
                      len, ZSTD_isError(got) ? ZSTD_getErrorName(got) : "short");
  }
  unshuffle(shuffled_.data(), len, es, static_cast<uint8_t *>(dst));
  return Status();
}

#else

struct Compressor::Contexts {};
Compressor::Compressor() = default;
Compressor::~Compressor() = default;

size_t Compressor::compress(const void *, size_t, size_t, void *, size_t) { return 0; }

Status Compressor::decompress(const void *, size_t n, size_t, void *, size_t) {
  return WCCL_ERROR(WCCL_ERR_UNSUPPORTED,
                    "a compressed piece of %zu bytes arrived, and zstd is not built in", n);
}

#endif

}  // namespace wccl::codec
