// Control-plane messages: every type round-trips, and every truncation, trailing byte, bad id,
// forbidden byte and impossible count is refused with PROTOCOL before anything is used.
#include <gtest/gtest.h>

#include "coord/messages.h"

namespace wccl::coord {
namespace {

std::vector<Member> sample_ring() {
  return {{0x1111, {"node-a", "10.1.0.1:7000", "host a"}},
          {0x2222, {"node-b", "[2001:db8::2]:7000", ""}}};
}

std::vector<ControlMessage> one_of_each() {
  std::vector<ControlMessage> out;
  auto add = [&](MessageType t) -> ControlMessage & {
    out.emplace_back();
    out.back().type = t;
    return out.back();
  };
  ControlMessage &join = add(MessageType::kJoin);
  join.peer = 0xabcdef;
  join.group = "gpu3";
  join.info = {"node-c", "10.1.0.3:7000", "machine 3", 4};
  ControlMessage &rejoin = add(MessageType::kRejoin);
  rejoin.peer = 0x1111;
  rejoin.group = "gpu0";
  rejoin.info = {"node-a", "10.1.0.1:7000", "machine-1"};
  rejoin.epoch = 42;
  rejoin.seq = 17;
  rejoin.ring = sample_ring();
  rejoin.crossovers = {1250000, 2500000};
  add(MessageType::kHeartbeat).peer = 7;
  ControlMessage &update = add(MessageType::kUpdate);
  update.peer = 8;
  update.epoch = 9;
  ControlMessage &reform = add(MessageType::kReform);
  reform.peer = 8;
  reform.epoch = 11;
  ControlMessage &leave = add(MessageType::kLeave);
  leave.peer = 8;
  leave.epoch = 10;
  ControlMessage &broken = add(MessageType::kLinkBroken);
  broken.peer = 8;
  broken.other = 0x2222;
  ControlMessage &report = add(MessageType::kLinkReport);
  report.peer = 8;
  report.epoch = 43;
  report.links = {{0x1111, 50123, 118000000}, {0x2222, 180000, 0}};
  ControlMessage &epoch = add(MessageType::kEpoch);
  epoch.epoch = 43;
  epoch.ring = sample_ring();
  epoch.crossovers = {6250000, 12500000};
  epoch.origin = static_cast<uint32_t>(EpochOrigin::kAfterLoss);
  ControlMessage &revoked = add(MessageType::kRevoked);
  revoked.epoch = 43;
  revoked.other = 0x2222;
  revoked.text = "node-b: silent for 5000 ms (peer_timeout_ms)";
  ControlMessage &removed = add(MessageType::kRemoved);
  removed.epoch = 44;
  removed.text = "declared lost: silent for 5000 ms (peer_timeout_ms)";
  add(MessageType::kProbe).epoch = 44;
  add(MessageType::kLeft).epoch = 44;
  ControlMessage &pending = add(MessageType::kPending);
  pending.epoch = 44;
  pending.count = 3;
  ControlMessage &done = add(MessageType::kDone);
  done.peer = 8;
  done.epoch = 43;
  done.seq = 1000;
  ControlMessage &failed = add(MessageType::kOpFailed);
  failed.peer = 8;
  failed.epoch = 43;
  failed.seq = 1001;
  failed.text = "ring link to node-b: connection reset";
  ControlMessage &commit = add(MessageType::kCommit);
  commit.epoch = 43;
  commit.seq = 1000;
  ControlMessage &error = add(MessageType::kError);
  error.code = WCCL_ERR_PROTOCOL;
  error.text = "peer 0000000000000008 updates from epoch 7, the current epoch is 9";
  return out;
}

TEST(ControlMessages, EveryTypeRoundTrips) {
  for (const ControlMessage &m : one_of_each()) {
    const std::vector<uint8_t> bytes = encode(m);
    ControlMessage out;
    Status st = decode(bytes.data(), bytes.size(), &out);
    ASSERT_TRUE(st.ok()) << static_cast<int>(m.type) << ": " << st.to_string();
    EXPECT_EQ(out.type, m.type);
    EXPECT_EQ(out.peer, m.peer);
    EXPECT_EQ(out.group, m.group);
    EXPECT_EQ(out.info.name, m.info.name);
    EXPECT_EQ(out.info.address, m.info.address);
    EXPECT_EQ(out.info.node, m.info.node);
    EXPECT_EQ(out.info.node_groups, m.info.node_groups);
    EXPECT_EQ(out.epoch, m.epoch);
    EXPECT_EQ(out.seq, m.seq);
    EXPECT_EQ(out.ring, m.ring);
    ASSERT_EQ(out.ring.size(), m.ring.size());
    for (size_t i = 0; i < m.ring.size(); ++i) {
      EXPECT_EQ(out.ring[i].info.node, m.ring[i].info.node) << "ring member " << i;
    }
    EXPECT_EQ(out.other, m.other);
    EXPECT_EQ(out.code, m.code);
    EXPECT_EQ(out.count, m.count);
    EXPECT_EQ(out.text, m.text);
    ASSERT_EQ(out.links.size(), m.links.size());
    for (size_t i = 0; i < m.links.size(); ++i) {
      EXPECT_EQ(out.links[i].peer, m.links[i].peer);
      EXPECT_EQ(out.links[i].rtt_us, m.links[i].rtt_us);
      EXPECT_EQ(out.links[i].bytes_per_s, m.links[i].bytes_per_s);
    }
    EXPECT_EQ(out.crossovers, m.crossovers);
    EXPECT_EQ(out.origin, m.origin);
  }
}

TEST(ControlMessages, EveryTruncationAndAnyTrailingByteIsRefused) {
  for (const ControlMessage &m : one_of_each()) {
    const std::vector<uint8_t> bytes = encode(m);
    for (size_t n = 0; n < bytes.size(); ++n) {
      ControlMessage out;
      out.epoch = 12345;
      EXPECT_EQ(decode(bytes.data(), n, &out).code(), WCCL_ERR_PROTOCOL)
          << "type " << static_cast<int>(m.type) << " cut to " << n << " bytes";
      EXPECT_EQ(out.epoch, 12345u) << "a refused message must not be written out";
    }
    std::vector<uint8_t> longer = bytes;
    longer.push_back(0);
    ControlMessage out;
    Status st = decode(longer.data(), longer.size(), &out);
    EXPECT_EQ(st.code(), WCCL_ERR_PROTOCOL);
    EXPECT_NE(st.message().find("after the last field"), std::string::npos) << st.message();
  }
}

TEST(ControlMessages, BadFieldsAreNamed) {
  auto expect = [](std::vector<uint8_t> bytes, const char *words) {
    ControlMessage out;
    Status st = decode(bytes.data(), bytes.size(), &out);
    EXPECT_EQ(st.code(), WCCL_ERR_PROTOCOL) << words;
    EXPECT_NE(st.message().find(words), std::string::npos) << st.message();
  };
  ControlMessage hb;
  hb.type = MessageType::kHeartbeat;
  hb.peer = 5;
  std::vector<uint8_t> b = encode(hb);
  b[0] = 99;
  expect(b, "unknown type 99");
  b = encode(hb);
  b[1] = 1;
  expect(b, "reserved byte");
  hb.peer = 0;
  expect(encode(hb), "peer id is 0");

  ControlMessage join;
  join.type = MessageType::kJoin;
  join.peer = 1;
  join.group = "g";
  join.info = {"has space", "a:1", ""};
  expect(encode(join), "name holds a forbidden byte 0x20");
  join.info = {"ok", std::string("a\n:1"), ""};
  expect(encode(join), "address holds a forbidden byte 0x0a");

  ControlMessage epoch;
  epoch.type = MessageType::kEpoch;
  epoch.epoch = 1;
  epoch.ring = sample_ring();
  b = encode(epoch);
  b[14] = 0xff;  // ring count 0x...ff: far more members than the bytes that follow
  b[15] = 0xff;
  expect(b, "ring members (limit");
  epoch.ring[1].id = 0;
  expect(encode(epoch), "ring member id is 0");
  epoch.ring = sample_ring();
  epoch.origin = 4;
  expect(encode(epoch), "EPOCH with unknown origin 4");

  ControlMessage report;
  report.type = MessageType::kLinkReport;
  report.peer = 3;
  report.epoch = 1;
  report.links = {{0x1111, 0}};
  expect(encode(report), "round trip is 0");
  report.links = {{0, 10}};
  expect(encode(report), "link peer id is 0");
  report.links = {{0x1111, 10}};
  b = encode(report);
  b[18] = 0xff;  // link count 0x...ff: far more links than the bytes that follow
  b[19] = 0xff;
  expect(b, "links (limit");

  std::vector<uint8_t> huge(kMaxControlBytes + 1, 0);
  expect(huge, "exceeds the limit");
}

// The epoch links' first message: 24 bytes, little-endian, refused when it is any other size or
// names peer 0.
TEST(ControlMessages, LinkHelloRoundTripsAndIsChecked) {
  const std::vector<uint8_t> bytes =
      encode(LinkHello{0x0102030405060708ULL, 0x1122334455667788ULL, 0x2A});
  ASSERT_EQ(bytes.size(), kLinkHelloBytes);
  EXPECT_EQ(bytes[0], 0x08);
  EXPECT_EQ(bytes[15], 0x11);
  EXPECT_EQ(bytes[16], 0x2A);
  LinkHello h;
  ASSERT_TRUE(decode(bytes.data(), bytes.size(), &h).ok());
  EXPECT_EQ(h.epoch, 0x0102030405060708ULL);
  EXPECT_EQ(h.from, 0x1122334455667788ULL);
  EXPECT_EQ(h.seq, 0x2Au);
  EXPECT_EQ(decode(bytes.data(), bytes.size() - 1, &h).code(), WCCL_ERR_PROTOCOL);
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_EQ(decode(longer.data(), longer.size(), &h).code(), WCCL_ERR_PROTOCOL);
  const std::vector<uint8_t> nobody = encode(LinkHello{7, 0, 0});
  const Status st = decode(nobody.data(), nobody.size(), &h);
  EXPECT_EQ(st.code(), WCCL_ERR_PROTOCOL);
  EXPECT_NE(st.message().find("link hello peer id"), std::string::npos) << st.message();
}

TEST(ControlMessages, NoticesBecomeTheirMessages) {
  Notice n;
  n.kind = Notice::Kind::kRevoked;
  n.to = 1;
  n.epoch = 3;
  n.lost = 9;
  n.reason = "gone";
  ControlMessage m = to_message(n);
  EXPECT_EQ(m.type, MessageType::kRevoked);
  EXPECT_EQ(m.epoch, 3u);
  EXPECT_EQ(m.other, 9u);
  EXPECT_EQ(m.text, "gone");
  n.kind = Notice::Kind::kEpoch;
  n.ring = sample_ring();
  n.origin = EpochOrigin::kAfterLeave;
  m = to_message(n);
  EXPECT_EQ(m.type, MessageType::kEpoch);
  EXPECT_EQ(m.ring, sample_ring());
  EXPECT_EQ(m.origin, 3u);
}

}  // namespace
}  // namespace wccl::coord
