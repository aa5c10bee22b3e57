// algo=AUTO's crossovers for an epoch, from what its links measured, without I/O.
//
// Every member must pick the same algorithm for the same operation, so the coordinator computes
// the crossovers once per epoch and sends them with the epoch (EPOCH's crossovers). The model is
// the textbook one, each term from measurements (LINK_REPORT: a link's smallest round trip and the
// highest rate it delivered while busy), with L the sum of RTT/2 over the ring's links:
//
//   all-gather(S) = (n-1)/n * L                          +  (n-1) * S / B_ring
//   tree(S)       = 2 * the deeper tree's longest root-to-leaf sum of RTT/2  +  2 S / B_tree
//   ring(S)       = 2(n-1)/n * L                         +  2(n-1)/n * S / B_ring
//
// The all-gather passes each member's contribution n-1 hops round the ring, so every member sends
// n-1 buffers; the ring's 2(n-1) steps go round it 2(n-1)/n times, every member sending 2(n-1)/n
// buffers; a tree all-reduce goes up its deepest path and down again, and its busiest member
// (interior in one tree: half the buffer up, to two children down; a leaf in the other) sends 2S.
// B_ring and B_tree are the slowest links each uses; a link with no rate of its own (it never
// carried a large message) is taken at the slower of its two ends' fastest links. Fewest delays
// first, fewest bytes last: the all-gather wins the smallest buffers (where it wins at all), the
// tree the next, the ring the largest. docs/algorithms.md has the derivation and wan.md the
// crossovers it gave on the emulator.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "algo/crossovers.h"
#include "coord/membership.h"

namespace wccl::coord {

using LinkOf = std::function<LinkEstimate(PeerId, PeerId)>;

// The all-gather schedule keeps every member's contribution (n times the buffer): it is never
// chosen above this many bytes, whatever the model says (at n = 2 it always wins by a half round
// trip).
inline constexpr uint64_t kMaxAllgatherBytes = uint64_t{64} << 20;

// The crossovers on `ring` (in ring order: rank i is ring[i]):
// - tree_max_bytes: the largest all-reduce for which the tree is faster than the ring, at least 1
//   (a tree that never wins: only an empty buffer takes it); 0 when the model has no answer: fewer
//   than 3 members, or a link of the ring or the trees without a round trip, or without a rate of
//   its own or at both ends.
// - allgather_max_bytes: the largest for which the all-gather is faster than the ring and (where
//   tree_max_bytes is not 0) the tree, at most kMaxAllgatherBytes; 0 when it never is, or when a
//   link of the ring has no round trip or rate.
algo::Crossovers crossovers(const std::vector<Member> &ring, const LinkOf &link);

}  // namespace wccl::coord
