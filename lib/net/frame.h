// Wire framing (docs/protocol.md is the spec). A frame is a fixed 48-byte little-endian header
// followed by `length` payload bytes. The header is validated completely before the receiver
// allocates or writes anything for the payload.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/status.h"

namespace wccl::net {

inline constexpr uint32_t kFrameMagic = 0x4C434357;  // bytes 'W' 'C' 'C' 'L'
inline constexpr uint16_t kProtocolVersion = 9;
inline constexpr size_t kFrameHeaderBytes = 48;
inline constexpr uint32_t kMaxFramePayload = 16u << 20;   // receivers reject longer frames
inline constexpr uint64_t kMaxMessageBytes = 1ULL << 40;  // 1 TiB
inline constexpr size_t kMaxPeerNameBytes = 64;

enum class FrameType : uint8_t {
  kHello = 1,  // first frame on every connection, both directions
  kData = 2,   // a piece of a message
};

// Identifies a message on a link. Unique among the messages in flight in one direction.
struct MessageKey {
  uint64_t epoch = 0;
  uint64_t seq = 0;
  uint32_t tag = 0;
  bool operator<(const MessageKey &o) const {
    if (epoch != o.epoch) return epoch < o.epoch;
    if (seq != o.seq) return seq < o.seq;
    return tag < o.tag;
  }
  bool operator==(const MessageKey &o) const {
    return epoch == o.epoch && seq == o.seq && tag == o.tag;
  }
  std::string to_string() const;
};

struct FrameHeader {
  FrameType type = FrameType::kData;
  uint8_t flags = 0;    // no flag is defined in version 1: must be 0
  uint32_t length = 0;  // payload bytes in this frame
  MessageKey key;
  uint64_t offset = 0;   // of this payload within the message
  uint64_t msg_len = 0;  // total bytes of the message
};

// The frame length a sender cuts a message of msg_len bytes into, on a link of `streams` streams:
// one frame per stream, ⌈msg_len / streams⌉ bytes, but at least kMinStripeBytes and at most
// frame_bytes (the last frame takes the rest). A message then moves under the congestion windows
// of all the streams at once: on a cold or long-idle link each window is a few packets, and a
// message cut into fewer frames than streams would take extra round trips to arrive
// (docs/wan.md). Below kMinStripeBytes more frames would cost more headers and wake-ups than the
// windows give back.
inline constexpr uint32_t kMinStripeBytes = 16u << 10;
uint32_t stripe_frame_bytes(uint64_t msg_len, int streams, uint32_t frame_bytes);

// What each TCP connection's kernel holds unsent at most (TCP_NOTSENT_LOWAT). A frame goes to a
// stream whose writes have room (LinkState::pump: less than frame_bytes of them unfinished), it
// reaches the peer after everything queued ahead of it on that stream, and the receiver needs
// every frame of a message. With the kernel's autotuned send buffer (up to tcp_wmem's 4 MB) a
// stream whose window a loss had just halved took as much as the others, each message waited for
// the slowest stream's queue, and a link ran at the pace of its slowest stream: a 256 MiB ring
// all-reduce over four Reno streams on the WAN emulator reached 68% of the link. With a short
// queue ahead of each frame a slow stream takes fewer frames, and the same run reaches about 90%
// (docs/wan.md). 128 KiB lasts a millisecond at 1 GB/s, ample time for the loop to refill it.
inline constexpr int kUnsentBytes = 128 << 10;

void encode_header(const FrameHeader &h, uint8_t out[kFrameHeaderBytes]);

// Decodes and validates: magic, then version (a mismatch names both versions), then every other
// field. max_payload is the receiver's frame limit (at most kMaxFramePayload). Returns PROTOCOL
// naming the offending field.
Status decode_header(const uint8_t in[kFrameHeaderBytes], uint32_t max_payload, FrameHeader *out);

// HELLO payload: who is on the other end and which link a connection belongs to.
struct Hello {
  uint8_t link_id[16] = {};   // chosen at random by the connecting side; zero from the acceptor
  uint16_t stream_index = 0;  // 0..stream_count-1 (acceptor: 0)
  uint16_t stream_count = 0;  // 1..64 (acceptor: 0)
  std::string name;           // peer id for logs, at most kMaxPeerNameBytes
};

inline constexpr size_t kHelloFixedBytes = 24;
inline constexpr size_t kMaxHelloBytes = kHelloFixedBytes + kMaxPeerNameBytes;

// Encodes the payload into out (at least kMaxHelloBytes); returns its length.
size_t encode_hello(const Hello &hello, uint8_t *out);
// Validates a HELLO payload of `length` bytes. from_connector: the sender opened the connection.
Status decode_hello(const uint8_t *in, size_t length, bool from_connector, Hello *out);

}  // namespace wccl::net
