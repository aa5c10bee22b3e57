// Internal: the loop-thread side of a Link. Everything here except the Link interface it
// implements runs on the loop thread; the interface's methods post to it.
#pragma once

#include <atomic>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "net/link.h"

struct sockaddr;

namespace wccl::net {

class Core;
class Stream;

// A message being sent: cut into frames from next_offset on, done once every frame is written.
struct SendOp {
  MessageKey key;
  const uint8_t *data;
  uint64_t len;
  uint64_t next_offset = 0;
  bool all_cut = false;
  uint32_t frames_in_flight = 0;
  Completion done;
  std::list<SendOp>::iterator self;
};

// A posted receive, waiting for the frames of its message.
struct RecvOp {
  uint8_t *data;
  uint64_t len;           // the message's length; with `got`, the capacity until a frame fixes it
  size_t *got;            // null: exactly len bytes; else any length up to len, reported here
  bool sized = false;     // a frame has fixed the length (always, without `got`)
  uint64_t reserved = 0;  // bytes of frames begun: no stream may write past len in total
  uint64_t received = 0;  // bytes of frames finished
  Completion done;
};

class LinkState final : public Link, public std::enable_shared_from_this<LinkState> {
 public:
  enum class State { kSetup, kOpen, kClosed };
  enum class RxBegin { kGo, kPark };

  LinkState(std::shared_ptr<Core> core, bool is_client, int stream_count,
            Clock::time_point deadline);

  // Link, from any thread.
  using Link::recv;
  Status send(const MessageKey &key, const void *data, size_t len, Completion done) override;
  Status recv(const MessageKey &key, void *data, size_t len, size_t *got, Completion done) override;
  void close(Status why) override;
  Status on_close(Completion fn) override;
  Status run(std::function<void()> fn) override;
  void pace(uint64_t bytes_per_s) override;
  const std::string &peer_name() const override { return peer_name_; }
  const std::string &peer_subject() const override { return peer_subject_; }
  const std::string &peer_address() const override { return peer_address_; }
  const std::string &local_host() const override { return local_host_; }
  int stream_count() const override { return stream_count_; }
  LinkStats stats() const override { return {bytes_sent_.load(), bytes_received_.load()}; }
  uint32_t min_rtt_us() const override { return min_rtt_us_.load(std::memory_order_relaxed); }
  uint64_t delivery_rate() const override { return delivery_rate_.load(std::memory_order_relaxed); }
  bool on_loop_thread() const override;

  // All below run on the loop thread.
  void fail(const Status &cause);
  // Client set-up, once the address is known: one connection per stream.
  void open_streams(const ::sockaddr *sa);
  // Server set-up: an accepted stream said hello for slot `index`.
  void attach(Stream *stream, int index);
  void stream_ready();
  // A frame of op was written (on_write).
  void frame_sent(SendOp *op, uint32_t length);
  // Where the data frame h goes (*dst), or kPark: no receive for it yet; the stream waits.
  Result<RxBegin> rx_begin(Stream *stream, const FrameHeader &h, uint8_t **dst);
  void rx_done(const FrameHeader &h);
  // The peer closed or reset the link (a stream read its end, or a write found it gone): every
  // send fails now, and the link fails once drained (see link.h). `ended`: the stream that read
  // its end (null for a write).
  void peer_closing(Stream *ended, const Status &why);
  // A stream parked: when the peer is closing, the link may now be drained.
  void stream_parked();
  void check_timeouts(Clock::time_point now);

  std::shared_ptr<Core> core_;
  const bool is_client_;
  const int stream_count_;
  State state_ = State::kSetup;
  Status error_;
  Clock::time_point setup_deadline_;
  Clock::time_point last_rx_;
  uint8_t link_id_[16] = {};
  std::vector<Stream *> streams_;  // slot per stream index; owned by the loop (freed on close)
  int ready_ = 0;
  std::function<void(Result<std::shared_ptr<Link>>)> on_connected_;  // client: set-up outcome
  std::function<void(std::shared_ptr<Link>)> on_accepted_;  // server: the listener's on_link
  std::string peer_name_, peer_subject_, peer_address_, local_host_;
  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
  std::atomic<uint32_t> min_rtt_us_{0};
  std::atomic<uint64_t> delivery_rate_{0};
  Clock::time_point tcp_sampled_{};
  // The last rate pace() was given, or kPaceUnknown when its post failed. A rate is at most
  // INT64_MAX (wccl_opts_t.max_link_rate), so no call asks for kPaceUnknown.
  static constexpr uint64_t kPaceUnknown = ~uint64_t{0};
  std::atomic<uint64_t> pace_asked_{0};
  uint64_t pace_{0};  // loop thread: the rate the streams are paced at
  // The least a paced stream sends per second: slower, on loopback (64 KiB segments, sent two at a
  // time), its packets could come further apart than a link's silence timeout.
  static constexpr uint64_t kMinStreamPace = 31250;
  bool peer_closing_ = false;  // see peer_closing()
  Status peer_closed_why_;
  Clock::time_point peer_closed_at_{};

 private:
  void do_send(SendOp op);
  void do_recv(const MessageKey &key, RecvOp op);
  void pump();
  void sample_tcp(bool all_streams_busy);
  // Sets every stream's SO_MAX_PACING_RATE to its share of pace_ (unlimited for 0).
  void apply_pace();
  void defer(std::function<void()> fn);
  // Every queued send completes with why, and the queue is emptied.
  void fail_sends(const Status &why);
  // Fails the link (peer_closed_why_) if no stream can deliver more: each has ended or is parked.
  void check_drained();
  // cause, naming the peer this link leads to where it does not already.
  Status about_peer(const Status &cause) const;

  std::list<SendOp> sends_;
  std::list<SendOp>::iterator next_cut_ = sends_.end();  // first op with bytes not yet in a frame
  size_t next_stream_ = 0;
  std::map<MessageKey, RecvOp> recvs_;
  std::map<MessageKey, std::vector<Stream *>> parked_;  // streams waiting for a recv of the key
  std::vector<Completion> on_close_;                    // run when the link fails
};

}  // namespace wccl::net
