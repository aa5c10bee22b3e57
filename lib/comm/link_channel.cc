#include "comm/link_channel.h"

#include "algo/exchange.h"

namespace wccl::comm {

Result<net::Link *> LinkChannel::link(int peer) {
  auto it = links_.find(peer);
  if (it == links_.end() || !it->second) {
    return WCCL_ERROR(WCCL_ERR_INTERNAL, "no link to rank %d in epoch %llu (not a neighbour)", peer,
                      static_cast<unsigned long long>(epoch_));
  }
  return it->second.get();
}

net::MessageKey LinkChannel::key(uint32_t tag) const {
  return {epoch_, tag == algo::kCallTag ? seq_ : data_seq_, tag};
}

Status LinkChannel::send(int peer, uint32_t tag, const void *data, size_t len,
                         algo::Completion done) {
  WCCL_ASSIGN_OR_RETURN(net::Link * l, link(peer));
  return l->send(key(tag), data, len, std::move(done));
}

Status LinkChannel::recv(int peer, uint32_t tag, void *data, size_t len, size_t *got,
                         algo::Completion done) {
  WCCL_ASSIGN_OR_RETURN(net::Link * l, link(peer));
  return l->recv(key(tag), data, len, got, std::move(done));
}

void LinkChannel::abort(const Status &why) {
  if (before_close_) before_close_(why);
  // ABORTED, whatever failed: closed here, so no neighbour is suspected of it (Member::
  // link_broken); the text says why, in this member's log of the link.
  const Status closed = WCCL_ERROR(WCCL_ERR_ABORTED, "operation %llu of epoch %llu failed here: %s",
                                   static_cast<unsigned long long>(seq_),
                                   static_cast<unsigned long long>(epoch_), why.message().c_str());
  for (auto &[rank, l] : links_) {
    if (l) l->close(closed);
  }
}

}  // namespace wccl::comm
