#include "comm/epoch_links.h"

#include <array>

#include "coord/messages.h"

namespace wccl::comm {

void EpochLinks::accepted(const std::shared_ptr<net::Link> &link) {
  auto hello = std::make_shared<std::array<uint8_t, coord::kLinkHelloBytes>>();
  Status st =
      link->recv(kLinkHello, hello->data(), hello->size(), [this, link, hello](const Status &got) {
        if (!got.ok()) return;
        coord::LinkHello h;
        const Status valid = coord::decode(hello->data(), hello->size(), &h);
        if (!valid.ok()) return link->close(valid);
        adopt(h.epoch, h.from, link);
      });
  if (!st.ok()) link->close(st);
}

EpochLinks::Links EpochLinks::begin_epoch(const Member &view) {
  std::lock_guard<std::mutex> lock(mu_);
  Links previous = std::exchange(links_, {});
  epoch_ = view.epoch();
  rank_ = view.rank();
  ring_ = view.ring();
  neighbours_ = view.neighbours();
  unwatched_.clear();
  for (auto r = neighbours_.begin(); r != neighbours_.end() && *r < rank_;
       ++r) {  // they connect to us
    auto early = early_.find({epoch_, ring_[static_cast<size_t>(*r)].id});
    if (early == early_.end()) continue;
    links_[*r] = early->second;
    unwatched_.emplace_back(early->first.second, early->second);
  }
  early_.erase(early_.begin(), early_.lower_bound({epoch_ + 1, 0}));
  return previous;
}

void EpochLinks::open() {
  std::vector<std::pair<int, coord::Member>> to_open;
  std::vector<std::pair<coord::PeerId, std::shared_ptr<net::Link>>> adopted;
  uint64_t epoch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    epoch = epoch_;
    adopted = std::exchange(unwatched_, {});
    for (auto r = neighbours_.upper_bound(rank_); r != neighbours_.end();
         ++r) {  // we connect to them
      to_open.emplace_back(*r, ring_[static_cast<size_t>(*r)]);
    }
  }
  // Watched here, not in begin_epoch: on the loop thread a link's callbacks may run inline, and
  // begin_epoch runs under the communicator's mutex.
  for (auto &[id, link] : adopted) watch(link, id, epoch);
  changed();  // the links adopted at begin_epoch may complete the set
  for (auto &[r, member] : to_open) {
    const coord::PeerId peer = member.id;
    const int rank = r;
    Status st = transport_.connect(
        member.info.address, [this, epoch, peer, rank](Result<std::shared_ptr<net::Link>> link) {
          if (!link.ok()) {
            if (events_.broken) events_.broken(epoch, peer, link.status(), /*connecting=*/true);
            return;
          }
          // The hello goes out before the link is handed to anyone, so it is the first message.
          auto hello =
              std::make_shared<std::vector<uint8_t>>(coord::encode(coord::LinkHello{epoch, self_}));
          (void)link.value()->send(kLinkHello, hello->data(), hello->size(),
                                   [hello](const Status &) {});
          bool stale;
          {
            std::lock_guard<std::mutex> lock(mu_);
            stale = epoch != epoch_ || closed_;  // checked with the assignment, under one lock
            if (!stale) links_[rank] = link.value();
          }
          if (stale) {
            link.value()->close(WCCL_ERROR(WCCL_ERR_ABORTED, "epoch ended"));
            return;
          }
          watch(link.value(), peer, epoch);
          changed();
        });
    if (!st.ok()) WCCL_LOG(log_, kWarn, "cannot open a link: %s", st.to_string().c_str());
  }
}

void EpochLinks::adopt(uint64_t epoch, coord::PeerId from, const std::shared_ptr<net::Link> &link) {
  bool adopted = false;
  std::shared_ptr<net::Link> replaced;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int r = epoch == epoch_ && !closed_ ? coord::rank_in(ring_, from) : -1;
    if (r >= 0 && r < rank_ && neighbours_.count(r) != 0) {
      auto it = links_.find(r);
      if (it != links_.end()) replaced = it->second;
      links_[r] = link;
      adopted = true;
    } else if (epoch > epoch_ && !closed_ && early_.size() < kMaxEarlyLinks) {
      early_[{epoch, from}] = link;  // its EPOCH message reached the neighbour before us
      return;
    }
  }
  if (replaced) replaced->close(WCCL_ERROR(WCCL_ERR_ABORTED, "replaced by a newer link"));
  if (!adopted) {
    // A link for an epoch that is over (or from a peer that is not our neighbour): its frames
    // are never applied.
    link->close(WCCL_ERROR(WCCL_ERR_ABORTED,
                           "link for epoch %llu, not the current one, or not from a neighbour",
                           static_cast<unsigned long long>(epoch)));
    return;
  }
  watch(link, from, epoch);
  changed();
}

void EpochLinks::watch(const std::shared_ptr<net::Link> &link, coord::PeerId peer, uint64_t epoch) {
  (void)link->on_close([this, peer, epoch](const Status &why) {
    if (events_.broken) events_.broken(epoch, peer, why, /*connecting=*/false);
  });
}

bool EpochLinks::complete(Links *out) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (links_.size() != neighbours_.size()) return false;
  if (out != nullptr) *out = links_;
  return true;
}

EpochLinks::Links EpochLinks::current() const {
  std::lock_guard<std::mutex> lock(mu_);
  return links_;
}

void EpochLinks::stop() {
  std::lock_guard<std::mutex> lock(mu_);
  closed_ = true;
}

void EpochLinks::close(const Status &why) {
  Links links;
  decltype(early_) early;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    links = std::exchange(links_, {});
    early = std::exchange(early_, {});
  }
  for (auto &[rank, l] : links) l->close(why);
  for (auto &[key, l] : early) l->close(why);
}

}  // namespace wccl::comm
