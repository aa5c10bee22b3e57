// The communicator: one peer's membership in a group (DESIGN §3-§4). It joins through the
// coordinator, keeps a control link to it (heartbeats, answers to probes), follows its epochs,
// for each epoch opens the links to its neighbours (ring and trees, at most 8 whatever the group's
// size), tagged with the epoch, and runs collective operations over them; a state sync links its
// donors and receivers that are not neighbours for that operation alone.
//
// The protocol's rules (the epoch view, the numbering and outcome of operations, the membership
// calls) are comm::Member's, a state machine without I/O; this class is its shell: it feeds
// the view what arrives (coordinator messages, calls, the end of data phases) under one mutex and
// carries out the actions it returns (sends, decisions, cancelling a data phase, an epoch's links).
// Two shells of their own carry the I/O: the coordinator session (ControlSession) and the epoch's
// links to the other members (EpochLinks); this class runs the operations.
//
// Operations. submit() numbers an operation within the epoch and queues it; every member must
// submit the same operations in the same order (members found in different ones revoke the epoch
// rather than wait: Member). One worker thread runs the data phases in that
// order (the next one starts while the previous waits for its commit). A data phase that
// completes reports DONE to the coordinator; the operation succeeds on its COMMIT and fails with
// PEER_LOST on the epoch's revocation, on every member alike. A data phase that fails here
// (broken link, timeout) reports OP_FAILED, which revokes the epoch for everyone. Results are
// copied to the caller's buffer by the thread that collects the outcome (wait/test), after the
// commit; until then the caller's buffers are untouched.
//
// Threading: the public calls may come from any thread; join/update/leave/wait block the caller
// (each with its timeout) and abort() from another thread ends any of those waits with ABORTED.
// The communicator has two transport threads of its own: the control thread carries the
// coordinator link (one TCP connection) and the heartbeat timer; the data thread carries the
// links to the other members. A data thread saturated by bulk TLS (a core's worth at a few Gbit/s)
// then never delays a heartbeat: otherwise a busy member could be declared silent. Two
// communicators in one process (two groups) are independent: no global state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include <deque>
#include <thread>

#include "comm/control_session.h"
#include "comm/epoch_links.h"
#include "comm/member.h"
#include "comm/op.h"
#include "coord/channel.h"
#include "coord/membership.h"
#include "core/config.h"
#include "net/transport.h"

namespace wccl::comm {

class Communicator {
 public:
  // Reads coordinator, group, name, listen, advertise, heartbeat_ms, join_timeout_ms,
  // op_timeout_ms and the transport keys. Blocks until the coordinator admits this peer into an
  // epoch. INVALID_ARGUMENT without a coordinator address; COORDINATOR_UNREACHABLE if it cannot
  // be reached or drops this peer (its log says why); AUTH if TLS fails; TIMEOUT after
  // join_timeout_ms.
  static Result<std::unique_ptr<Communicator>> join(const Config &cfg);
  ~Communicator();  // leaves abruptly: the coordinator sees the link close
  Communicator(const Communicator &) = delete;
  Communicator &operator=(const Communicator &) = delete;

  // Waits until the coordinator has decided the next epoch (survivors + admitted joiners). After
  // a revocation this is how survivors continue; a peer that was declared lost is admitted again.
  // COORDINATOR_UNREACHABLE while the coordinator is away, TIMEOUT after op_timeout_ms, ABORTED;
  // INVALID_USAGE while operations this peer submitted are not decided.
  Status update();
  // update() that admits no joiner and fails with PEER_LOST for a peer that was declared lost:
  // state sync re-forms the survivors with it to finish a transfer inside one call, where a
  // joiner admitted mid-call would be running other operations.
  Status reform();
  // Leaves gracefully at the update barrier: the others' update completes without this peer and
  // nobody is revoked. Afterwards only destruction is allowed.
  Status leave();
  // Any thread: ends every current and future wait with ABORTED and closes the links.
  void abort();

  int rank() const;
  int size() const;
  uint64_t epoch() const;
  bool revoked() const;     // the current epoch lost a peer; update() to continue
  int pending() const;      // peers waiting to be admitted at the next update
  bool update_due() const;  // the group waits for this member's update (Member::update_due)
  uint32_t epoch_origin()
      const;  // a wccl_epoch_origin_t: how the coordinator formed the current epoch
  std::vector<coord::PeerId> ring() const;    // the current epoch's members, in ring order
  CommStats stats() const;                    // the counters since join
  std::vector<LinkStats> link_stats() const;  // the current epoch's links, in rank order
  coord::PeerId id() const { return id_; }
  size_t chunk_bytes() const { return chunk_bytes_; }  // the configured pipelining unit
  std::chrono::milliseconds op_timeout() const { return op_timeout_; }  // config key op_timeout_ms
  bool sync_compress() const { return sync_compress_; }                 // config key sync_compress
  // This communicator's memory on `device` (made on first use; it lives as long as the
  // communicator), for state sync's device tensors. Collectives find theirs in submit().
  Result<algo::DeviceMemory *> device_memory(gpu::Device *device);
  // Waits up to `timeout` for the revocation of the current epoch; true if it happened.
  bool wait_revoked(std::chrono::milliseconds timeout) const;
  // The links of the current epoch to this peer's neighbours (ring and trees) by rank, once all
  // are open (empty for a one-peer epoch). TIMEOUT if they are not open within `timeout`.
  Status links(std::chrono::milliseconds timeout, std::map<int, std::shared_ptr<net::Link>> *out);

  // Queues collective c (c.in is read, c.out is where the result goes; any c.algo) with the given
  // timeout for the whole operation (0: op_timeout_ms). Errors: ABORTED; PEER_LOST if the epoch
  // is revoked; INVALID_USAGE after leave() or with kMaxOpsInFlight undecided operations;
  // INVALID_ARGUMENT from algo::check. On error nothing was queued.
  // An operation past the one after which another member waits at the update barrier (it has run
  // fewer operations of the epoch) can never complete: it revokes the epoch (PEER_LOST).
  Result<std::shared_ptr<Op>> submit(const algo::Collective &c, std::chrono::milliseconds timeout);
  // Waits for op's outcome (until its deadline: TIMEOUT), copies the result out on success, and
  // fills stats. Call once per op from one thread; later calls return the same outcome.
  Status wait(const std::shared_ptr<Op> &op, OpStats *stats);
  // The outcome if decided (collected as by wait), IN_PROGRESS otherwise.
  Status test(const std::shared_ptr<Op> &op, OpStats *stats);

 private:
  // What the member's state machine decided that must be done outside mu_ (sends, closing links,
  // logging).
  struct Effects {
    std::vector<coord::ControlMessage> sends;
    // Links to close, and why: the previous epoch's, a decided state sync's (EpochLinks).
    std::vector<std::pair<std::shared_ptr<net::Link>, Status>> closing;
    bool open_links = false;
    std::vector<Status> warnings;
  };
  explicit Communicator(const Config &cfg);
  // Under mu_: applies the view's actions to this communicator's operations and links.
  Effects apply(Actions actions);
  // Without mu_: what apply() left to do.
  void carry_out(const Effects &effects);
  // Control thread (the ControlSession's events):
  void on_control(const coord::ControlMessage &m);
  void on_control_lost(const Status &why);
  void on_heartbeat_tick();
  std::vector<coord::ControlMessage> on_reconnected();
  // Data thread: the epoch's links (EpochLinks) report.
  void wake();
  void on_link_broken(uint64_t epoch, coord::PeerId peer, const Status &why, bool connecting);
  Status send(const coord::ControlMessage &m);
  Status membership_call(coord::MessageType type, const char *what);  // update, reform, leave
  // Any thread, under mu_: waits for `done`, or abort / coordinator loss / timeout. While
  // `through_loss` holds, a lost coordinator does not end the wait (the heartbeat timer
  // reconnects).
  template <typename Pred, typename Through = bool (*)()>
  Status wait(
      std::unique_lock<std::mutex> &lock, std::chrono::milliseconds timeout, const char *what,
      Pred done, Through through_loss = [] { return false; });
  // Under mu_: op has its outcome.
  void decide(const std::shared_ptr<Op> &op, Status outcome);
  // Worker thread:
  void work();
  void run(const std::shared_ptr<Op> &op);
  Status finish(const std::shared_ptr<Op> &op, OpStats *stats, std::unique_lock<std::mutex> &lock);

  Logger log_;
  const coord::PeerId id_;
  std::string group_, listen_;
  coord::PeerInfo info_;
  std::chrono::milliseconds heartbeat_, join_timeout_, op_timeout_;
  std::unique_ptr<net::Transport> transport_;  // the links to the other members
  std::unique_ptr<ControlSession> control_;    // the coordinator link and the heartbeat timer

  // Guards the state below. Never held while calling into a link, channel or transport: on their
  // loop threads those run completions inline, and completions take it.
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::unique_ptr<Member>
      view_;              // the protocol's rules: epoch, ring, operations' numbering and outcomes
  bool closing_ = false;  // the destructor has begun: the transport may be gone
  std::unique_ptr<EpochLinks> links_;  // the current epoch's links to the other members

  // Operations, under mu_.
  // One per GPU that held a caller's buffers; outlives every Op's and spare's scratch (declared
  // before them).
  std::map<gpu::Device *, std::unique_ptr<algo::DeviceMemory>> device_memory_;
  Result<algo::DeviceMemory *> device_memory_locked(gpu::Device *device);
  const size_t chunk_bytes_;
  const bool sync_compress_;
  const size_t tree_max_bytes_;
  std::map<std::pair<uint64_t, uint64_t>, std::shared_ptr<Op>> ops_;  // undecided, by (epoch, seq)
  std::deque<std::shared_ptr<Op>> queue_;  // for the worker, in order (decided ones are skipped)
  algo::Exchange *running_exchange_ = nullptr;  // cancelled on revocation or abort
  ScratchSpares spares_;
  CommStats stats_;  // under mu_
  bool stop_ = false;
  std::thread worker_;
};

// Undecided operations a communicator accepts at once.
inline constexpr size_t kMaxOpsInFlight = Member::kMaxOpsInFlight;

}  // namespace wccl::comm
