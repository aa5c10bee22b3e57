// A member's links to the other members of its current epoch (DESIGN §4, docs/protocol.md "Links
// between members"): the communicator's shell around the data transport. For each epoch, of each
// pair of members the lower rank connects to the other's advertised address and first sends a
// coord::LinkHello (epoch, its id) under kLinkHello; the higher rank keeps an accepted link only if
// its hello names the current epoch and a lower-ranked member of it, and holds links for an epoch
// it has not heard of yet (at most kMaxEarlyLinks) until it does. A new epoch closes the previous
// epoch's links. A link of the current epoch that fails, or cannot be opened, is reported
// (Events::broken), so the coordinator can probe the peer.
//
// Threading: any thread. Its mutex is taken inside the communicator's (the epoch changes under
// both, so nobody sees a new epoch with the old links) and never held while calling a link, the
// transport or an event.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <utility>
#include <vector>

#include "comm/member.h"
#include "coord/membership.h"
#include "core/log.h"
#include "net/transport.h"

namespace wccl::comm {

inline constexpr net::MessageKey kLinkHello{~0ULL - 1, 0, 0};
inline constexpr size_t kMaxEarlyLinks = 16;

class EpochLinks {
 public:
  using Links = std::map<int, std::shared_ptr<net::Link>>;  // by rank
  struct Events {
    std::function<void()> changed;  // a link of the current epoch opened
    // The link to `peer` of `epoch` failed with `why` (`connecting`: it could not be opened).
    std::function<void(uint64_t epoch, coord::PeerId peer, const Status &why, bool connecting)>
        broken;
  };
  EpochLinks(net::Transport &transport, coord::PeerId self, Logger log, Events events)
      : transport_(transport), self_(self), log_(std::move(log)), events_(std::move(events)) {}

  // Every link the transport accepts comes here; it waits for its hello.
  void accepted(const std::shared_ptr<net::Link> &link);
  // The view's new epoch, whose links go to its neighbours (Member::neighbours): the previous
  // epoch's links are returned for the caller to close (outside its locks), the ones already
  // opened to us for this epoch are taken, and open() (outside the caller's locks) starts the rest.
  Links begin_epoch(const Member &view);
  // Connects to the members of higher rank in the epoch begun last.
  void open();
  // The current epoch's links, if every one is open (out: all of them; true for a member alone).
  bool complete(Links *out = nullptr) const;
  Links current() const;
  // No link opens or is taken from now on (the communicator is being destroyed: its links go with
  // the transport).
  void stop();
  // stop(), and the current links are closed with `why`.
  void close(const Status &why);

 private:
  void adopt(uint64_t epoch, coord::PeerId from, const std::shared_ptr<net::Link> &link);
  void watch(const std::shared_ptr<net::Link> &link, coord::PeerId peer, uint64_t epoch);
  void changed() const {
    if (events_.changed) events_.changed();
  }

  net::Transport &transport_;
  const coord::PeerId self_;
  Logger log_;
  const Events events_;
  mutable std::mutex mu_;
  bool closed_ = false;
  uint64_t epoch_ = 0;
  int rank_ = -1;
  std::vector<coord::Member> ring_;
  std::set<int> neighbours_;  // ranks this member links to in epoch_
  Links links_;               // the current epoch's open links
  // Links opened to us for epochs not announced to us yet, by (epoch, opener).
  std::map<std::pair<uint64_t, coord::PeerId>, std::shared_ptr<net::Link>> early_;
  std::vector<std::pair<coord::PeerId, std::shared_ptr<net::Link>>>
      unwatched_;  // taken from early_ by begin_epoch
};

}  // namespace wccl::comm
