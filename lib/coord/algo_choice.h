// algo=AUTO's ring/tree crossover for an epoch, from what its links measured, without I/O.
//
// Every member must pick the same algorithm for the same operation, so the coordinator computes
// the crossover once per epoch and sends it with the epoch (EPOCH's tree_max_bytes). The model is
// the textbook one, each term from measurements (LINK_REPORT: a link's smallest round trip and the
// highest rate it delivered while busy):
//
//   ring(S) = 2(n-1)/n * sum over the ring's links of RTT/2  +  2(n-1)/n * S / B_ring
//   tree(S) = 2 * the deeper tree's longest root-to-leaf sum of RTT/2  +  2 S / B_tree
//
// The ring's 2(n-1) steps go round the ring 2(n-1)/n times; a tree all-reduce goes up its deepest
// path and down again; every ring member sends 2(n-1)/n of the buffer, while a tree's busiest
// member (interior in one tree: half the buffer up, to two children down; a leaf in the other)
// sends 2S. B_ring and B_tree are the slowest links each uses; a link with no rate of its own (it
// never carried a large message) is taken at the slower of its two ends' fastest links. The tree
// wins below the size where the two meet. docs/algorithms.md has the derivation and wan.md the
// crossovers it gave on the emulator.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "coord/membership.h"

namespace wccl::coord {

using LinkOf = std::function<LinkEstimate(PeerId, PeerId)>;

// The largest all-reduce, in bytes, for which the tree is faster than the ring on `ring` (in ring
// order: rank i is ring[i]), at least 1 (a tree that never wins: only an empty buffer takes it).
// 0 when the model has no answer: fewer than 3 members, or a link of the ring or the trees
// without a round trip, or without a rate of its own or at both ends.
uint64_t tree_crossover_bytes(const std::vector<Member> &ring, const LinkOf &link);

}  // namespace wccl::coord
