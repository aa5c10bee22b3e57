#include "algo/send_codec.h"

namespace wccl::algo {

const uint8_t *SendCodec::encode(size_t key, const uint8_t *src, size_t len, size_t es,
                                 std::vector<uint8_t> *slot, size_t *wire_len) {
  *wire_len = len;
  int &decided = decided_[key];
  const bool always = mode_ == Compress::kAlways;
  if (mode_ == Compress::kOff || len < kMinCompressBytes || decided == kRaw ||
      (!always && link_bytes_per_ns_ <= 0)) {
    return src;
  }
  slot->resize(len);
  const auto t0 = Clock::now();
  const size_t n = zstd_.compress(src, len, es, slot->data(), slot->size());
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  if (decided == kUntried && !always) {
    const bool faster = ns > 0 && static_cast<double>(len) / ns > link_bytes_per_ns_;
    decided = n != 0 && n <= len / 8 * 7 && faster ? kCompressed : kRaw;
  }
  if (n == 0) return src;
  *wire_len = n;
  return slot->data();
}

void SendCodec::sent(size_t wire_len, bool raw) {
  if (!raw || link_bytes_per_ns_ > 0 || mode_ != Compress::kAuto) return;
  retired_raw_ += wire_len;
  // The first kProbeSkip bytes mostly fill socket buffers, which take them faster than the link.
  if (retired_raw_ >= kProbeSkip && !probing_) {
    probing_ = true;
    probe_start_ = Clock::now();
    probe_from_ = retired_raw_;
  } else if (probing_ && retired_raw_ - probe_from_ >= kProbeBytes) {
    const double ns = std::chrono::duration<double, std::nano>(Clock::now() - probe_start_).count();
    link_bytes_per_ns_ = ns > 0 ? static_cast<double>(retired_raw_ - probe_from_) / ns : 0;
  }
}

}  // namespace wccl::algo
