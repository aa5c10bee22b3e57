#include "net/frame.h"

#include <algorithm>
#include <cstring>

#include "core/little_endian.h"

namespace wccl::net {
namespace {

using wccl::get_le;
using wccl::put_le;

// Header layout, byte offsets.
enum : size_t {
  kOffMagic = 0,
  kOffVersion = 4,
  kOffType = 6,
  kOffFlags = 7,
  kOffTag = 8,
  kOffLength = 12,
  kOffEpoch = 16,
  kOffSeq = 24,
  kOffOffset = 32,
  kOffMsgLen = 40,
};

}  // namespace

std::string MessageKey::to_string() const {
  return format("(epoch %llu, seq %llu, tag %u)", static_cast<unsigned long long>(epoch),
                static_cast<unsigned long long>(seq), tag);
}

uint32_t stripe_frame_bytes(uint64_t msg_len, int streams, uint32_t frame_bytes) {
  const auto n = static_cast<uint64_t>(std::max(streams, 1));
  const uint64_t share = std::max<uint64_t>((msg_len + n - 1) / n, kMinStripeBytes);
  return static_cast<uint32_t>(std::min<uint64_t>(share, frame_bytes));
}

void encode_header(const FrameHeader &h, uint8_t out[kFrameHeaderBytes]) {
  put_le<uint32_t>(out + kOffMagic, kFrameMagic);
  put_le<uint16_t>(out + kOffVersion, kProtocolVersion);
  put_le<uint8_t>(out + kOffType, static_cast<uint8_t>(h.type));
  put_le<uint8_t>(out + kOffFlags, h.flags);
  put_le<uint32_t>(out + kOffTag, h.key.tag);
  put_le<uint32_t>(out + kOffLength, h.length);
  put_le<uint64_t>(out + kOffEpoch, h.key.epoch);
  put_le<uint64_t>(out + kOffSeq, h.key.seq);
  put_le<uint64_t>(out + kOffOffset, h.offset);
  put_le<uint64_t>(out + kOffMsgLen, h.msg_len);
}

Status decode_header(const uint8_t in[kFrameHeaderBytes], uint32_t max_payload, FrameHeader *out) {
  const uint32_t magic = get_le<uint32_t>(in + kOffMagic);
  if (magic != kFrameMagic) {
    // A TLS record (handshake 0x16 or alert 0x15, version 0x03 0x0N) where a frame should be means
    // the peer speaks TLS and this side does not.
    if ((in[0] == 0x16 || in[0] == 0x15) && in[1] == 0x03) {
      return WCCL_ERROR(WCCL_ERR_AUTH,
                        "peer speaks TLS but this side has tls=off; configure both sides alike");
    }
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "bad frame magic 0x%08x (expected 0x%08x)", magic,
                      kFrameMagic);
  }
  const uint16_t version = get_le<uint16_t>(in + kOffVersion);
  if (version != kProtocolVersion) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                      "peer speaks wccl protocol version %u, this library speaks version %u",
                      version, kProtocolVersion);
  }
  FrameHeader h;
  const uint8_t type = in[kOffType];
  if (type != static_cast<uint8_t>(FrameType::kHello) &&
      type != static_cast<uint8_t>(FrameType::kData)) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "unknown frame type %u", type);
  }
  h.type = static_cast<FrameType>(type);
  h.flags = in[kOffFlags];
  if (h.flags != 0) return WCCL_ERROR(WCCL_ERR_PROTOCOL, "undefined frame flags 0x%02x", h.flags);
  h.key.tag = get_le<uint32_t>(in + kOffTag);
  h.length = get_le<uint32_t>(in + kOffLength);
  h.key.epoch = get_le<uint64_t>(in + kOffEpoch);
  h.key.seq = get_le<uint64_t>(in + kOffSeq);
  h.offset = get_le<uint64_t>(in + kOffOffset);
  h.msg_len = get_le<uint64_t>(in + kOffMsgLen);
  if (h.length > max_payload) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "frame payload of %u bytes exceeds the limit of %u",
                      h.length, max_payload);
  }
  if (h.msg_len > kMaxMessageBytes) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "message length %llu exceeds the limit of %llu",
                      static_cast<unsigned long long>(h.msg_len),
                      static_cast<unsigned long long>(kMaxMessageBytes));
  }
  if (h.offset > h.msg_len || h.length > h.msg_len - h.offset) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL,
                      "frame [offset %llu, +%u) lies outside its message of %llu bytes",
                      static_cast<unsigned long long>(h.offset), h.length,
                      static_cast<unsigned long long>(h.msg_len));
  }
  if (h.length == 0 && h.msg_len != 0) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "empty frame in a non-empty message");
  }
  if (h.type == FrameType::kHello) {
    if (h.key.epoch != 0 || h.key.seq != 0 || h.key.tag != 0 || h.offset != 0 ||
        h.msg_len != h.length) {
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "hello frame with data-frame fields set");
    }
    if (h.length < kHelloFixedBytes || h.length > kMaxHelloBytes) {
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "hello payload of %u bytes (expected %zu..%zu)",
                        h.length, kHelloFixedBytes, kMaxHelloBytes);
    }
  }
  *out = h;
  return Status();
}

// Hello payload layout: link_id[16], stream_index u16, stream_count u16, name_len u16,
// reserved u16 (0), name bytes.
size_t encode_hello(const Hello &hello, uint8_t *out) {
  const size_t name_len =
      hello.name.size() < kMaxPeerNameBytes ? hello.name.size() : kMaxPeerNameBytes;
  std::memcpy(out, hello.link_id, 16);
  put_le<uint16_t>(out + 16, hello.stream_index);
  put_le<uint16_t>(out + 18, hello.stream_count);
  put_le<uint16_t>(out + 20, static_cast<uint16_t>(name_len));
  put_le<uint16_t>(out + 22, 0);
  std::copy_n(hello.name.data(), name_len, out + kHelloFixedBytes);
  return kHelloFixedBytes + name_len;
}

Status decode_hello(const uint8_t *in, size_t length, bool from_connector, Hello *out) {
  if (length < kHelloFixedBytes || length > kMaxHelloBytes) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "hello payload of %zu bytes", length);
  }
  Hello h;
  std::memcpy(h.link_id, in, 16);
  h.stream_index = get_le<uint16_t>(in + 16);
  h.stream_count = get_le<uint16_t>(in + 18);
  const uint16_t name_len = get_le<uint16_t>(in + 20);
  if (get_le<uint16_t>(in + 22) != 0)
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "hello reserved field set");
  if (kHelloFixedBytes + name_len != length) {
    return WCCL_ERROR(WCCL_ERR_PROTOCOL, "hello name length %u does not match payload of %zu bytes",
                      name_len, length);
  }
  h.name.assign(reinterpret_cast<const char *>(in + kHelloFixedBytes), name_len);
  for (char c : h.name) {
    if (c <= ' ' || c > '~')
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "hello name holds a non-printable byte");
  }
  if (from_connector) {
    if (h.stream_count < 1 || h.stream_count > 64 || h.stream_index >= h.stream_count) {
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "hello stream %u of %u is out of range", h.stream_index,
                        h.stream_count);
    }
  } else {
    static const uint8_t kZero[16] = {};
    if (h.stream_count != 0 || h.stream_index != 0 || std::memcmp(h.link_id, kZero, 16) != 0) {
      return WCCL_ERROR(WCCL_ERR_PROTOCOL, "acceptor's hello carries link fields");
    }
  }
  *out = h;
  return Status();
}

}  // namespace wccl::net
