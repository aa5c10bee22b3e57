// Messages between peers and the coordinator (the control plane), and their encoding. Each is
// the payload of one transport message; docs/protocol.md specifies the layout. Decoding checks
// every field and every length before use and rejects trailing bytes, so a malformed message is a
// PROTOCOL error naming the field, never a partial result.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "algo/crossovers.h"
#include "coord/membership.h"
#include "core/status.h"

namespace wccl::coord {

// One encoded message, at most: a ring of kMaxRingMembers with the longest names and addresses
// (520 bytes a member) fits.
inline constexpr size_t kMaxControlBytes = 4 << 20;
inline constexpr size_t kMaxTextBytes = 255;  // names, groups, addresses, reasons

enum class MessageType : uint8_t {
  // peer -> coordinator
  kJoin = 1,        // peer, group, info
  kRejoin = 2,      // peer, group, info, epoch, ring, crossovers: after a coordinator restart
  kHeartbeat = 3,   // peer
  kUpdate = 4,      // peer, epoch, seq (operations this peer submitted in the epoch), count (call)
  kLeave = 5,       // peer, epoch, seq, count
  kLinkBroken = 6,  // peer, other (the suspect)
  kDone = 7,        // peer, epoch, seq: this peer's data phase of operation seq completed
  kOpFailed = 8,    // peer, epoch, seq, code, text: operation seq failed here; revoke the epoch
  kReform = 9,      // peer, epoch, seq, count: an update that admits no joiner (state sync's retry)
  kLinkReport = 10,  // peer, epoch, links: what this peer's links measured (ring order, algo=AUTO)
  // coordinator -> peer
  kEpoch = 16,    // epoch, count (the recipient's call it answers; 0: an announcement), ring,
                  // crossovers, origin
  kRevoked = 17,  // epoch, seq (the last committed operation), other (the lost peer), text
                  // (reason), failed (the operation that failed, 0: none), code (its failure)
  kRemoved = 18,  // epoch, text (reason)
  kProbe = 19,    // epoch
  kError = 20,    // code, text: the coordinator refused the last request
  kPending = 21,  // epoch, count: peers waiting to be admitted at the next update
  kCommit = 22,   // epoch, seq: every member completed operations up to seq: they succeed
  kBarrier = 23,  // epoch, seq: a member reached the update barrier after seq operations
  kLeft = 24,     // epoch: this peer's LEAVE completed (the others' update went on without it)
};

struct ControlMessage {
  MessageType type = MessageType::kHeartbeat;
  PeerId peer = 0;     // the sender (peer -> coordinator)
  std::string group;   // kJoin, kRejoin
  PeerInfo info;       // kJoin, kRejoin
  uint64_t epoch = 0;  // kRejoin, kUpdate, kReform, kLeave, kDone, kOpFailed, and every coordinator
                       // message but kError
  uint64_t seq =
      0;  // kDone, kOpFailed, kCommit, kBarrier; kUpdate, kReform, kLeave: the operations
          // this peer submitted in the epoch; kRejoin: the last one it saw committed
  std::vector<Member> ring;  // kRejoin, kEpoch
  PeerId other = 0;          // kLinkBroken (suspect), kRevoked (lost)
  uint32_t code = 0;         // kError, kOpFailed, kRevoked: a wccl_result_t
  uint64_t failed = 0;       // kRevoked: the operation whose failure revoked the epoch
  uint32_t count =
      0;  // kPending; kUpdate, kReform, kLeave: the call's number; kEpoch: the call it answers
  std::string text;                    // kRevoked, kRemoved, kError, kOpFailed
  std::vector<LinkMeasurement> links;  // kLinkReport
  algo::Crossovers crossovers;  // kEpoch, kRejoin: algo=AUTO's in the epoch (0s: none measured)
  uint32_t origin = 0;          // kEpoch: how the coordinator formed the epoch (EpochOrigin)
};

// Text fields longer than kMaxTextBytes are cut to that length.
std::vector<uint8_t> encode(const ControlMessage &m);
Status decode(const uint8_t *data, size_t size, ControlMessage *out);

// The first message on an epoch's link between two members, from its connecting side (the lower
// rank of the pair): the epoch the link serves, who opened it, and the operation it is for (0: the
// epoch's schedule link; else the sequence number of the state sync that links a donor and a
// receiver that are not neighbours), so that the accepting side adopts it as that link
// (docs/protocol.md).
struct LinkHello {
  uint64_t epoch = 0;
  PeerId from = 0;
  uint64_t seq = 0;
};
inline constexpr size_t kLinkHelloBytes = 24;  // u64 epoch, u64 peer id, u64 operation
std::vector<uint8_t> encode(const LinkHello &h);
// PROTOCOL for a size other than kLinkHelloBytes or a peer id of 0.
Status decode(const uint8_t *data, size_t size, LinkHello *out);

// The coordinator's notice as the message that delivers it.
ControlMessage to_message(const Notice &n);
// The ERROR that tells a peer why the coordinator refused its message (Membership::on_message).
ControlMessage refusal(const Status &why);

}  // namespace wccl::coord
