#include "comm/epoch_links.h"

#include <array>

namespace wccl::comm {

void EpochLinks::accepted(const std::shared_ptr<net::Link> &link) {
  auto hello = std::make_shared<std::array<uint8_t, coord::kLinkHelloBytes>>();
  Status st =
      link->recv(kLinkHello, hello->data(), hello->size(), [this, link, hello](const Status &got) {
        if (!got.ok()) return;
        coord::LinkHello h;
        const Status valid = coord::decode(hello->data(), hello->size(), &h);
        if (!valid.ok()) return link->close(valid);
        adopt(h, link);
      });
  if (!st.ok()) link->close(st);
}

std::vector<std::shared_ptr<net::Link>> EpochLinks::take_all() {
  std::vector<std::shared_ptr<net::Link>> out;
  for (auto &[rank, l] : links_) out.push_back(l);
  for (auto &[seq, op] : ops_) {
    for (auto &[rank, l] : op.links) out.push_back(l);
  }
  for (auto &[key, l] : offered_) out.push_back(l);
  for (Pending &p : pending_) {
    if (p.taken && p.rank < 0) out.push_back(p.taken);  // the others are held above
  }
  links_.clear();
  ops_.clear();
  offered_.clear();
  pending_.clear();
  return out;
}

std::vector<std::shared_ptr<net::Link>> EpochLinks::begin_epoch(const Member &view) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<net::Link>> previous = take_all();
  epoch_ = view.epoch();
  rank_ = view.rank();
  ring_ = view.ring();
  neighbours_ = view.neighbours();
  wanted_seq_ = 0;
  for (int r : neighbours_) {
    const coord::Member &m = ring_[static_cast<size_t>(r)];
    if (r > rank_) {  // we connect to them
      pending_.push_back({0, r, m.id, m.info.address, nullptr});
      continue;
    }
    auto early = early_.find({epoch_, m.id});  // they connect to us
    if (early == early_.end()) continue;
    links_[r] = early->second;
    pending_.push_back({0, r, m.id, std::string(), early->second});
  }
  early_.erase(early_.begin(), early_.lower_bound({epoch_ + 1, 0}));
  return previous;
}

void EpochLinks::want(uint64_t epoch, uint64_t seq, const std::set<int> &ranks) {
  std::lock_guard<std::mutex> lock(mu_);
  if (closed_ || epoch != epoch_ || seq <= wanted_seq_) return;
  wanted_seq_ = seq;
  OpLinks &op = ops_[seq];
  for (int r : ranks) {
    if (r == rank_ || r < 0 || r >= static_cast<int>(ring_.size()) || neighbours_.count(r) != 0)
      continue;
    const coord::Member &m = ring_[static_cast<size_t>(r)];
    op.wanted.insert(r);
    if (r > rank_) {
      pending_.push_back({seq, r, m.id, m.info.address, nullptr});
      continue;
    }
    auto offered = offered_.find({seq, m.id});
    if (offered == offered_.end()) continue;
    op.links[r] = offered->second;
    pending_.push_back({seq, r, m.id, std::string(), offered->second});
    offered_.erase(offered);
  }
  // What was offered for this operation by members it does not link, or for an earlier one.
  for (auto it = offered_.begin(); it != offered_.end() && it->first.first <= seq;) {
    pending_.push_back({it->first.first, -1, it->first.second, std::string(), it->second});
    it = offered_.erase(it);
  }
}

void EpochLinks::open() {
  std::vector<Pending> todo;
  uint64_t epoch;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (closed_) return;
    epoch = epoch_;
    todo = std::exchange(pending_, {});
  }
  // Watched here, not where they were taken: on the loop thread a link's callbacks may run inline,
  // and begin_epoch and want() run under the communicator's mutex.
  for (const Pending &p : todo) {
    if (!p.taken) continue;
    if (p.rank < 0) {
      p.taken->close(WCCL_ERROR(WCCL_ERR_ABORTED,
                                "a link for operation %llu, which does not link "
                                "these members",
                                static_cast<unsigned long long>(p.seq)));
    } else {
      watch(p.taken, epoch, p);
    }
  }
  changed();  // the links taken may complete a set
  for (const Pending &p : todo) {
    if (!p.taken) connect(epoch, p);
  }
}

void EpochLinks::connect(uint64_t epoch, const Pending &p) {
  Status st = transport_.connect(p.address, [this, epoch,
                                             p](Result<std::shared_ptr<net::Link>> link) {
    if (!link.ok()) {
      if (p.seq != 0) {
        return op_failed(
            epoch, p.seq,
            WCCL_ERROR(link.status().code(),
                       "cannot open the link to rank %d for operation %llu: %s", p.rank,
                       static_cast<unsigned long long>(p.seq), link.status().message().c_str()));
      }
      if (events_.broken) events_.broken(epoch, p.peer, link.status(), /*connecting=*/true);
      return;
    }
    // The hello goes out before the link is handed to anyone, so it is the first message.
    auto hello = std::make_shared<std::vector<uint8_t>>(
        coord::encode(coord::LinkHello{epoch, self_, p.seq}));
    (void)link.value()->send(kLinkHello, hello->data(), hello->size(), [hello](const Status &) {});
    bool kept;
    {
      std::lock_guard<std::mutex> lock(mu_);  // checked with the assignment, under one lock
      kept = epoch == epoch_ && !closed_;
      if (kept && p.seq == 0) {
        links_[p.rank] = link.value();
      } else if (kept) {
        auto op = ops_.find(p.seq);
        kept = op != ops_.end();
        if (kept) op->second.links[p.rank] = link.value();
      }
    }
    if (!kept) {
      link.value()->close(WCCL_ERROR(WCCL_ERR_ABORTED, "epoch or operation ended"));
      return;
    }
    watch(link.value(), epoch, p);
    changed();
  });
  if (!st.ok()) {
    WCCL_LOG(log_, kWarn, "cannot open a link: %s", st.to_string().c_str());
    if (p.seq != 0) op_failed(epoch, p.seq, st);
  }
}

void EpochLinks::adopt(const coord::LinkHello &h, const std::shared_ptr<net::Link> &link) {
  bool adopted = false;
  int rank = -1;
  std::shared_ptr<net::Link> replaced;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const int r = h.epoch == epoch_ && !closed_ ? coord::rank_in(ring_, h.from) : -1;
    const bool lower = r >= 0 && r < rank_;
    if (h.seq == 0 && lower && neighbours_.count(r) != 0) {
      auto it = links_.find(r);
      if (it != links_.end()) replaced = it->second;
      links_[r] = link;
      adopted = true;
    } else if (h.seq != 0 && lower && neighbours_.count(r) == 0) {
      auto op = ops_.find(h.seq);
      if (op != ops_.end()) {
        adopted = op->second.wanted.count(r) != 0 && op->second.links.count(r) == 0;
        if (adopted) op->second.links[r] = link;
      } else if (h.seq > wanted_seq_ && offered_.size() < ring_.size() &&
                 offered_.count({h.seq, h.from}) == 0) {
        offered_[{h.seq, h.from}] = link;  // it reached that operation before this member did
        return;
      }
    } else if (h.seq == 0 && h.epoch > epoch_ && !closed_ && early_.size() < kMaxEarlyLinks) {
      early_[{h.epoch, h.from}] = link;  // its EPOCH message reached the neighbour before us
      return;
    }
    rank = r;
  }
  if (replaced) replaced->close(WCCL_ERROR(WCCL_ERR_ABORTED, "replaced by a newer link"));
  if (!adopted) {
    // A link for an epoch or an operation that is over, or from a peer this member does not link
    // to: its frames are never applied.
    link->close(WCCL_ERROR(WCCL_ERR_ABORTED,
                           "link for epoch %llu operation %llu, not a current one, or not from a "
                           "member linked to",
                           static_cast<unsigned long long>(h.epoch),
                           static_cast<unsigned long long>(h.seq)));
    return;
  }
  watch(link, h.epoch, Pending{h.seq, rank, h.from, std::string(), link});
  changed();
}

void EpochLinks::watch(const std::shared_ptr<net::Link> &link, uint64_t epoch, const Pending &p) {
  (void)link->on_close([this, epoch, seq = p.seq, rank = p.rank, peer = p.peer](const Status &why) {
    if (seq != 0) {
      return op_failed(epoch, seq,
                       WCCL_ERROR(why.code(), "the link to rank %d for operation %llu: %s", rank,
                                  static_cast<unsigned long long>(seq), why.message().c_str()));
    }
    if (events_.broken) events_.broken(epoch, peer, why, /*connecting=*/false);
  });
}

void EpochLinks::op_failed(uint64_t epoch, uint64_t seq, const Status &why) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto op = ops_.find(seq);
    if (epoch != epoch_ || op == ops_.end() || !op->second.failure.ok()) return;
    op->second.failure = why;
  }
  changed();
}

bool EpochLinks::complete(Links *out, uint64_t seq, Status *failed) const {
  std::lock_guard<std::mutex> lock(mu_);
  const OpLinks *op = nullptr;
  if (seq != 0) {
    auto it = ops_.find(seq);
    if (it == ops_.end()) {
      if (failed != nullptr) {
        *failed = WCCL_ERROR(WCCL_ERR_ABORTED, "operation %llu of epoch %llu is over",
                             static_cast<unsigned long long>(seq),
                             static_cast<unsigned long long>(epoch_));
      }
      return true;
    }
    op = &it->second;
    if (!op->failure.ok()) {
      if (failed != nullptr) *failed = op->failure;
      return true;
    }
  }
  if (links_.size() != neighbours_.size()) return false;
  if (op != nullptr && op->links.size() != op->wanted.size()) return false;
  if (out != nullptr) {
    *out = links_;
    if (op != nullptr) out->insert(op->links.begin(), op->links.end());
  }
  return true;
}

std::vector<std::shared_ptr<net::Link>> EpochLinks::release(uint64_t epoch, uint64_t seq) {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<std::shared_ptr<net::Link>> out;
  auto op = ops_.find(seq);
  if (epoch != epoch_ || op == ops_.end()) return out;
  for (auto &[rank, l] : op->second.links) out.push_back(l);
  ops_.erase(op);
  return out;
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
  std::vector<std::shared_ptr<net::Link>> links;
  decltype(early_) early;
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
    links = take_all();
    early = std::exchange(early_, {});
  }
  for (auto &l : links) l->close(why);
  for (auto &[key, l] : early) l->close(why);
}

}  // namespace wccl::comm
