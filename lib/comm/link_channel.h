// The real Channel: one operation's messages over the epoch's links to its neighbours, keyed
// (epoch, operation number, tag) on the wire (docs/protocol.md), the number's upper 32 bits the
// call's key (algo::call_key): members whose calls differ post and send under different keys, so
// a message of one is never read into a receive of the other (the call check's own message,
// algo::kCallTag, goes under the plain number). abort() closes those links with
// ABORTED (closed here, naming what failed): it is only called when the operation failed, which
// revokes the epoch anyway.
#pragma once

#include <functional>
#include <map>
#include <memory>

#include "algo/channel.h"
#include "net/transport.h"

namespace wccl::comm {

class LinkChannel : public algo::Channel {
 public:
  LinkChannel(uint64_t epoch, uint64_t seq, uint32_t call_key, int rank, int size,
              std::map<int, std::shared_ptr<net::Link>> links)
      : epoch_(epoch),
        seq_(seq),
        data_seq_((seq & 0xFFFFFFFFULL) | (uint64_t{call_key} << 32)),
        rank_(rank),
        size_(size),
        links_(std::move(links)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status send(int peer, uint32_t tag, const void *data, size_t len, algo::Completion done) override;
  Status recv(int peer, uint32_t tag, void *data, size_t len, size_t *got,
              algo::Completion done) override;
  void abort(const Status &why) override;
  // Runs in abort(), before the links close (Communicator::run: a call that differs is reported
  // to the coordinator before any neighbour can see a link close).
  void before_close(std::function<void(const Status &)> f) { before_close_ = std::move(f); }

 private:
  Result<net::Link *> link(int peer);
  net::MessageKey key(uint32_t tag) const;
  const uint64_t epoch_, seq_, data_seq_;
  const int rank_, size_;
  std::map<int, std::shared_ptr<net::Link>> links_;
  std::function<void(const Status &)> before_close_;
};

}  // namespace wccl::comm
