// A member's links to the other members of its current epoch (DESIGN §4, docs/protocol.md
// "Neighbour links"): the communicator's shell around the data transport. Each epoch links a
// member to its schedule neighbours only (Member::neighbours: the ring's and both trees', at most
// 8), and a state sync links its donors and receivers that are not neighbours for that operation
// alone (want, release). Of each pair the lower rank connects to the other's advertised address
// and first sends a coord::LinkHello (epoch, its id, the operation or 0); the higher rank keeps an
// accepted link only if its hello names the current epoch and a lower-ranked member it links to,
// holds schedule links for an epoch it has not heard of yet (at most kMaxEarlyLinks) and a state
// sync's links for an operation it has not reached yet (at most one per member of the epoch)
// until it does. A new epoch closes the previous epoch's links. A schedule link of the current
// epoch that fails, or cannot be opened, is reported (Events::broken), so the coordinator can probe
// the peer; an operation's link that fails fails that operation's wait for its links (complete),
// and its data phase sees the closed link itself.
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
#include <string>
#include <utility>
#include <vector>

#include "comm/member.h"
#include "coord/membership.h"
#include "coord/messages.h"
#include "core/log.h"
#include "net/transport.h"

namespace wccl::comm {

inline constexpr net::MessageKey kLinkHello{~0ULL - 1, 0, 0};
inline constexpr size_t kMaxEarlyLinks = 16;

class EpochLinks {
 public:
  using Links = std::map<int, std::shared_ptr<net::Link>>;  // by rank
  struct Events {
    std::function<void()> changed;  // a link of the current epoch opened, or an operation's failed
    // The schedule link to `peer` of `epoch` failed with `why` (`connecting`: it could not be
    // opened).
    std::function<void(uint64_t epoch, coord::PeerId peer, const Status &why, bool connecting)>
        broken;
  };
  EpochLinks(net::Transport &transport, coord::PeerId self, Logger log, Events events)
      : transport_(transport), self_(self), log_(std::move(log)), events_(std::move(events)) {}

  // Every link the transport accepts comes here; it waits for its hello.
  void accepted(const std::shared_ptr<net::Link> &link);
  // The view's new epoch, whose links go to its neighbours (Member::neighbours): the previous
  // epoch's links (its operations' too) are returned for the caller to close (outside its locks),
  // the ones already opened to us for this epoch are taken, and open() (outside the caller's
  // locks) starts the rest.
  std::vector<std::shared_ptr<net::Link>> begin_epoch(const Member &view);
  // Operation `seq` of `epoch` (a state sync) exchanges bytes with `ranks`: those that are not
  // neighbours are linked for it, by open() (outside the caller's locks) where this member has the
  // lower rank, else by taking what they opened. Called in the order of the operations' seq, each
  // once, before the operation is decided.
  void want(uint64_t epoch, uint64_t seq, const std::set<int> &ranks);
  // Connects what begin_epoch and want() left to connect.
  void open();
  // The links of operation `seq` (0: any but a state sync that called want()): true once every
  // schedule link of the epoch and every link the operation wanted is open (out: all of them; a
  // member alone has none), or once one of the operation's links failed or the operation is over
  // (failed: why).
  bool complete(Links *out = nullptr, uint64_t seq = 0, Status *failed = nullptr) const;
  // Operation `seq` of `epoch` was decided: its links, returned for the caller to close.
  std::vector<std::shared_ptr<net::Link>> release(uint64_t epoch, uint64_t seq);
  Links current() const;  // the schedule links open now
  // No link opens or is taken from now on (the communicator is being destroyed: its links go with
  // the transport).
  void stop();
  // stop(), and the current links are closed with `why`.
  void close(const Status &why);

 private:
  struct OpLinks {  // one state sync's links beyond the neighbours
    std::set<int> wanted;
    Links links;
    Status failure;  // the first of its links that failed
  };
  struct Pending {  // for open(): a link to connect, or one taken from those opened to us
    uint64_t seq;
    int rank;
    coord::PeerId peer;
    std::string address;
    std::shared_ptr<net::Link> taken;  // to watch; null: connect to address
  };
  void adopt(const coord::LinkHello &hello, const std::shared_ptr<net::Link> &link);
  void connect(uint64_t epoch, const Pending &p);
  void watch(const std::shared_ptr<net::Link> &link, uint64_t epoch, const Pending &p);
  void op_failed(uint64_t epoch, uint64_t seq, const Status &why);
  std::vector<std::shared_ptr<net::Link>> take_all();  // under mu_: every link held
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
  Links links_;               // the current epoch's open schedule links
  // Links opened to us for epochs not announced to us yet, by (epoch, opener).
  std::map<std::pair<uint64_t, coord::PeerId>, std::shared_ptr<net::Link>> early_;
  std::map<uint64_t, OpLinks> ops_;  // epoch_'s state syncs from want() to release(), by seq
  uint64_t wanted_seq_ = 0;          // the last seq want() was called for in epoch_
  // Operation links opened to us for a seq after wanted_seq_, by (seq, opener): at most the
  // epoch's size.
  std::map<std::pair<uint64_t, coord::PeerId>, std::shared_ptr<net::Link>> offered_;
  std::vector<Pending> pending_;  // for open()
};

}  // namespace wccl::comm
