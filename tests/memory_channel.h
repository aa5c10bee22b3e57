// The in-memory Channel (DESIGN §2): n ranks in one process exchange messages through a shared
// Fabric, with fault injection for the algorithm tests. Delivery is immediate (on the sender's
// thread), or, with `shuffle`, done by a delivery thread that picks queued messages in random
// order across tags and peers, so completions arrive late, from another thread, out of order.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "algo/channel.h"

namespace wccl::test {

class Fabric {
 public:
  using Key = std::tuple<int, int, uint32_t>;  // from, to, tag
  struct Options {
    bool shuffle = false;
    uint32_t seed = 1;
    // Ordering constraints: the message `first` is held back until the message `until` has been
    // sent (a test of which messages a peer sends before which receives complete).
    struct Hold {
      Key first, until;
    };
    std::vector<Hold> holds;
  };
  Fabric(int n, Options options);
  explicit Fabric(int n) : Fabric(n, Options()) {}
  ~Fabric();

  // The rank dies when it posts its `after_sends`-th send (that message is not delivered): from
  // then on its operations, and its peers' operations with it, fail with IO.
  void kill_at_send(int rank, uint64_t after_sends);
  void kill(int rank, const Status &why);
  // Why the rank died (its channel's abort, kill, kill_at_send); OK while it lives.
  Status death(int rank);
  uint64_t sends(int rank);

  std::unique_ptr<algo::Channel> channel(int rank);

 private:
  friend class MemoryChannel;
  struct Recv {
    uint8_t *data;
    size_t len;
    size_t *got;  // null: the message must be exactly len bytes
    algo::Completion done;
  };
  struct Message {
    Key key;
    std::vector<uint8_t> bytes;
  };
  using Calls = std::vector<std::pair<algo::Completion, Status>>;

  Status send(int from, int to, uint32_t tag, const void *data, size_t len, algo::Completion done);
  Status recv(int from, int to, uint32_t tag, void *data, size_t len, size_t *got,
              algo::Completion done);
  // Under mu_: hands `m` to its receive if posted, else keeps it.
  void deliver(Message m, Calls *calls);
  static Status place(const std::vector<uint8_t> &bytes, const Recv &r);
  void kill_locked(int rank, const Status &why, Calls *calls);
  void pump();

  const int n_;
  const Options opt_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::map<Key, Recv> recvs_;
  std::map<Key, std::vector<uint8_t>> arrived_;
  std::vector<Message> queue_;  // shuffle mode: sent, not yet delivered
  std::set<Key> sent_keys_;     // with holds: every key sent so far
  std::vector<Message> held_;   // held back by a Hold whose `until` is not sent yet
  std::map<int, Status> dead_;
  std::map<int, uint64_t> sends_, kill_at_;
  std::mt19937 rng_;
  bool stop_ = false;
  std::thread pump_;
};

}  // namespace wccl::test
