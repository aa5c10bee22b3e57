// Frame header and hello encoding: round trips, and every malformed field rejected before use.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "net/frame.h"

namespace wccl::net {
namespace {

FrameHeader sample() {
  FrameHeader h;
  h.type = FrameType::kData;
  h.length = 4096;
  h.key = {7, 123456789012345ULL, 0xdeadbeef};
  h.offset = 1ULL << 33;
  h.msg_len = (1ULL << 33) + 8192;
  return h;
}

// Decodes bytes, expecting failure with `code` and `words` in the message.
void expect_rejected(const uint8_t *bytes, wccl_result_t code, const std::string &words) {
  FrameHeader out;
  out.length = 99;
  Status st = decode_header(bytes, kMaxFramePayload, &out);
  EXPECT_EQ(st.code(), code) << st.to_string();
  EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
  EXPECT_EQ(out.length, 99u) << "a rejected header must not be written out";
}

TEST(Frame, HeaderRoundTrip) {
  const FrameHeader h = sample();
  uint8_t buf[kFrameHeaderBytes];
  encode_header(h, buf);
  EXPECT_EQ(std::memcmp(buf, "WCCL", 4), 0);
  FrameHeader out;
  ASSERT_TRUE(decode_header(buf, kMaxFramePayload, &out).ok());
  EXPECT_EQ(out.type, h.type);
  EXPECT_EQ(out.flags, 0);
  EXPECT_EQ(out.length, h.length);
  EXPECT_TRUE(out.key == h.key);
  EXPECT_EQ(out.offset, h.offset);
  EXPECT_EQ(out.msg_len, h.msg_len);
}

TEST(Frame, EmptyMessageIsOneEmptyFrame) {
  FrameHeader h;
  uint8_t buf[kFrameHeaderBytes];
  encode_header(h, buf);
  FrameHeader out;
  EXPECT_TRUE(decode_header(buf, kMaxFramePayload, &out).ok());
}

TEST(Frame, MessagesAreCutIntoOneFramePerStream) {
  constexpr uint32_t kFrame = 1u << 20;
  EXPECT_EQ(stripe_frame_bytes(1u << 20, 4, kFrame), 256u << 10);  // a chunk over 4 streams
  EXPECT_EQ(stripe_frame_bytes((1u << 20) + 1, 4, kFrame),
            (256u << 10) + 1);                                           // rounded up: 4 frames
  EXPECT_EQ(stripe_frame_bytes(128u << 10, 1, kFrame), 128u << 10);      // one stream: one frame
  EXPECT_EQ(stripe_frame_bytes(64u << 20, 4, kFrame), kFrame);           // never above frame_bytes
  EXPECT_EQ(stripe_frame_bytes(64u << 10, 8, kFrame), kMinStripeBytes);  // never below 16 KiB...
  EXPECT_EQ(stripe_frame_bytes(100, 4, kFrame),
            kMinStripeBytes);  // ...so a small message is one frame
  EXPECT_EQ(stripe_frame_bytes(0, 4, kFrame), kMinStripeBytes);
  EXPECT_EQ(stripe_frame_bytes(1u << 20, 4, 4096), 4096u);  // frame_bytes below 16 KiB wins
}

TEST(Frame, EveryMalformedFieldIsRejected) {
  uint8_t good[kFrameHeaderBytes];
  encode_header(sample(), good);
  uint8_t b[kFrameHeaderBytes];
  auto reset = [&] { std::memcpy(b, good, sizeof(b)); };

  reset();
  b[0] = 'X';
  expect_rejected(b, WCCL_ERR_PROTOCOL, "bad frame magic");
  reset();
  b[4] = 1;
  expect_rejected(b, WCCL_ERR_PROTOCOL,
                  "peer speaks wccl protocol version 1, this library speaks version 9");
  reset();
  b[6] = 0;
  expect_rejected(b, WCCL_ERR_PROTOCOL, "unknown frame type 0");
  reset();
  b[6] = 3;
  expect_rejected(b, WCCL_ERR_PROTOCOL, "unknown frame type 3");
  reset();
  b[7] = 0x80;
  expect_rejected(b, WCCL_ERR_PROTOCOL, "undefined frame flags");

  FrameHeader h = sample();
  h.length = kMaxFramePayload + 1;
  h.msg_len = h.offset + h.length;
  encode_header(h, b);
  expect_rejected(b, WCCL_ERR_PROTOCOL, "exceeds the limit");

  h = sample();
  h.msg_len = kMaxMessageBytes + 1;
  encode_header(h, b);
  expect_rejected(b, WCCL_ERR_PROTOCOL, "message length");

  h = sample();
  h.offset = h.msg_len - 10;  // frame runs past the end
  encode_header(h, b);
  expect_rejected(b, WCCL_ERR_PROTOCOL, "lies outside its message");

  h = sample();
  h.offset = ~0ULL - 5;  // offset + length would wrap
  h.msg_len = kMaxMessageBytes;
  encode_header(h, b);
  expect_rejected(b, WCCL_ERR_PROTOCOL, "lies outside its message");

  h = sample();
  h.length = 0;
  encode_header(h, b);
  expect_rejected(b, WCCL_ERR_PROTOCOL, "empty frame in a non-empty message");

  h = FrameHeader();
  h.type = FrameType::kHello;
  h.length = kHelloFixedBytes;
  h.msg_len = kHelloFixedBytes;
  h.key.seq = 1;
  encode_header(h, b);
  expect_rejected(b, WCCL_ERR_PROTOCOL, "hello frame with data-frame fields");

  h.key.seq = 0;
  h.length = h.msg_len = kMaxHelloBytes + 1;
  encode_header(h, b);
  expect_rejected(b, WCCL_ERR_PROTOCOL, "hello payload of");
}

TEST(Frame, ReceiverLimitIsEnforced) {
  uint8_t b[kFrameHeaderBytes];
  encode_header(sample(), b);  // 4096-byte payload
  FrameHeader out;
  EXPECT_EQ(decode_header(b, 4095, &out).code(), WCCL_ERR_PROTOCOL);
  EXPECT_TRUE(decode_header(b, 4096, &out).ok());
}

TEST(Frame, TlsRecordWhereAFrameShouldBeIsAnAuthError) {
  uint8_t b[kFrameHeaderBytes] = {0x16, 0x03, 0x01, 0x02, 0x00};  // a TLS ClientHello record
  expect_rejected(b, WCCL_ERR_AUTH, "peer speaks TLS");
}

TEST(Hello, RoundTripAndValidation) {
  Hello h;
  for (int i = 0; i < 16; ++i) h.link_id[i] = static_cast<uint8_t>(i + 1);
  h.stream_index = 3;
  h.stream_count = 4;
  h.name = "node-7:1234";
  uint8_t buf[kMaxHelloBytes];
  const size_t n = encode_hello(h, buf);
  EXPECT_EQ(n, kHelloFixedBytes + h.name.size());
  Hello out;
  ASSERT_TRUE(decode_hello(buf, n, /*from_connector=*/true, &out).ok());
  EXPECT_EQ(out.name, h.name);
  EXPECT_EQ(out.stream_index, 3);
  EXPECT_EQ(out.stream_count, 4);
  EXPECT_EQ(std::memcmp(out.link_id, h.link_id, 16), 0);
  // An acceptor's hello must not carry link fields.
  EXPECT_EQ(decode_hello(buf, n, /*from_connector=*/false, &out).code(), WCCL_ERR_PROTOCOL);

  uint8_t bad[kMaxHelloBytes];
  std::memcpy(bad, buf, n);
  bad[16] = 4;  // index 4 of 4
  EXPECT_EQ(decode_hello(bad, n, true, &out).code(), WCCL_ERR_PROTOCOL);
  std::memcpy(bad, buf, n);
  bad[18] = 65;  // 65 streams
  EXPECT_EQ(decode_hello(bad, n, true, &out).code(), WCCL_ERR_PROTOCOL);
  std::memcpy(bad, buf, n);
  bad[20] = static_cast<uint8_t>(h.name.size() + 1);  // name length disagrees with the payload
  EXPECT_EQ(decode_hello(bad, n, true, &out).code(), WCCL_ERR_PROTOCOL);
  std::memcpy(bad, buf, n);
  bad[22] = 1;  // reserved
  EXPECT_EQ(decode_hello(bad, n, true, &out).code(), WCCL_ERR_PROTOCOL);
  std::memcpy(bad, buf, n);
  bad[kHelloFixedBytes] = '\n';  // unprintable name
  EXPECT_EQ(decode_hello(bad, n, true, &out).code(), WCCL_ERR_PROTOCOL);
  EXPECT_EQ(decode_hello(buf, kHelloFixedBytes - 1, true, &out).code(), WCCL_ERR_PROTOCOL);
}

}  // namespace
}  // namespace wccl::net
