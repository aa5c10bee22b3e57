// The transport: links between two peers, each made of `streams` TCP connections (TLS 1.3 unless
// tls=off), carrying messages identified by a MessageKey. docs/protocol.md specifies the wire;
// this header is the contract for the layers above.
//
// Threading. A Transport owns one libuv loop thread. Link::send, Link::recv and Link::close may be
// called from any thread, including from a completion callback; they hand the work to the loop
// thread and return at once. Completion callbacks run on the loop thread, each exactly once, after
// the link's state is consistent; they must not block, and an exception they throw is logged and
// dropped. An error *returned* by send/recv/close
// means the call did nothing and its callback will not run.
//
// Messages. A message is cut into frames of at most frame_bytes, striped over the link's streams
// (whichever stream has room in its write window takes the next frame) and reassembled by offset
// straight into the receiver's buffer. A receive names the key of the message it wants; frames of
// a message nobody has asked for yet stop that stream's reading until someone does, so a slow
// receiver slows the sender through TCP and memory stays bounded. Frames go out in the order the
// sends execute on the loop thread, so a receiver that posts its receives in a fixed order must
// get the messages in that order: a message queued behind one nobody has asked for yet waits.
//
// Failure. Any error on any stream fails the whole link: every pending operation completes with
// that status (IO for a closed or reset connection, TIMEOUT, PROTOCOL, AUTH), and so does every
// later one. Other links are unaffected. Timeouts: the whole set-up (connect, TLS handshake, hello
// on every stream) must finish within connect_timeout_ms; once a frame or message has started to
// arrive, a silence of io_timeout_ms fails the link; data the peer's kernel does not acknowledge
// for io_timeout_ms fails it too (TCP_USER_TIMEOUT). Waiting for a message that has not started is
// not a transport failure: the layers above bound that wait.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/config.h"
#include "core/status.h"
#include "net/frame.h"

struct sockaddr;

namespace wccl::net {

using Completion = std::function<void(Status)>;
using Clock = std::chrono::steady_clock;

class Core;
class Stream;
struct WriteReq;

struct LinkStats {
  uint64_t bytes_sent = 0;      // payload bytes whose write completed
  uint64_t bytes_received = 0;  // payload bytes placed into receive buffers
};

class Link : public std::enable_shared_from_this<Link> {
 public:
  ~Link();
  Link(const Link &) = delete;
  Link &operator=(const Link &) = delete;

  // Sends len bytes at data as the message `key`. data must stay valid and unchanged until done
  // runs. OK in done means every byte was handed to the kernel (not that the peer received it).
  Status send(const MessageKey &key, const void *data, size_t len, Completion done);
  // Receives the message `key` into data, which must be exactly the message's length (a message
  // of another length fails the link with PROTOCOL). A second receive of a key already waiting
  // completes with INVALID_USAGE. On failure data may hold part of the message.
  Status recv(const MessageKey &key, void *data, size_t len, Completion done);
  // The same into a buffer of capacity len: a message of at most len bytes is accepted (a longer
  // one fails the link with PROTOCOL) and *got holds its length before done runs OK.
  Status recv(const MessageKey &key, void *data, size_t len, size_t *got, Completion done);
  // Fails the link with `why` (ABORTED if why is OK): pending operations complete with it.
  void close(Status why = Status());
  // Runs fn on the link's loop thread, in order with the other work posted there (before
  // returning, when called on that thread).
  Status run(std::function<void()> fn);

  // Set on the loop thread before the link is handed out; stable afterwards.
  const std::string &peer_name() const { return peer_name_; }        // from the peer's hello
  const std::string &peer_subject() const { return peer_subject_; }  // certificate subject, "" if tls=off
  const std::string &peer_address() const { return peer_address_; }
  // This side's IP address on the link's first connection (as the peer sees it, NAT aside).
  const std::string &local_host() const { return local_host_; }
  int stream_count() const { return stream_count_; }
  LinkStats stats() const { return {bytes_sent_.load(), bytes_received_.load()}; }
  // True on the transport's I/O thread (inside completion callbacks).
  bool on_loop_thread() const;

 private:
  friend class Core;
  friend class Stream;
  friend class Transport;
  friend struct WriteReq;
  enum class State { kSetup, kOpen, kClosed };
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
  struct RecvOp {
    uint8_t *data;
    uint64_t len;           // the message's length; with `got`, the capacity until a frame fixes it
    size_t *got;            // null: exactly len bytes; else any length up to len, reported here
    bool sized = false;     // a frame has fixed the length (always, without `got`)
    uint64_t reserved = 0;  // bytes of frames begun: no stream may write past len in total
    uint64_t received = 0;  // bytes of frames finished
    Completion done;
  };
  enum class RxBegin { kGo, kPark };

  Link(std::shared_ptr<Core> core, bool is_client, int stream_count, Clock::time_point deadline);

  // All below run on the loop thread.
  void do_send(SendOp op);
  void do_recv(const MessageKey &key, RecvOp op);
  void fail(const Status &why);
  void open_streams(const ::sockaddr *sa);
  void attach(Stream *stream, int index);
  void stream_ready();
  void pump();
  void frame_sent(SendOp *op, uint32_t length);
  Result<RxBegin> rx_begin(Stream *stream, const FrameHeader &h, uint8_t **dst);
  void rx_done(const FrameHeader &h);
  void check_timeouts(Clock::time_point now);
  void defer(std::function<void()> fn);

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
  std::function<void(std::shared_ptr<Link>)> on_accepted_;          // server: the listener's on_link
  std::string peer_name_, peer_subject_, peer_address_, local_host_;

  std::list<SendOp> sends_;
  std::list<SendOp>::iterator next_cut_ = sends_.end();  // first op with bytes not yet in a frame
  size_t next_stream_ = 0;
  std::map<MessageKey, RecvOp> recvs_;
  std::map<MessageKey, std::vector<Stream *>> parked_;  // streams waiting for a recv of the key

  std::atomic<uint64_t> bytes_sent_{0};
  std::atomic<uint64_t> bytes_received_{0};
};

class Transport {
 public:
  // Reads tls, tls_cert, tls_key, tls_ca, streams, frame_bytes, sock_buf_bytes,
  // connect_timeout_ms, io_timeout_ms, name and log_level from cfg and starts the loop thread.
  static Result<std::unique_ptr<Transport>> create(const Config &cfg);
  // Fails every link with ABORTED, closes listeners, joins the loop thread.
  ~Transport();
  Transport(const Transport &) = delete;
  Transport &operator=(const Transport &) = delete;

  // Listens on address ("host:port", "[v6]:port"; port 0 picks one) and returns the bound port.
  // on_link runs on the loop thread for each link whose streams have all arrived and said hello.
  Result<int> listen(const std::string &address,
                     std::function<void(std::shared_ptr<Link>)> on_link);
  // Opens a link of `streams` connections to address; done runs on the loop thread with the open
  // link or the error (IO, TIMEOUT, AUTH, PROTOCOL; INVALID_ARGUMENT for a bad address).
  Status connect(const std::string &address,
                 std::function<void(Result<std::shared_ptr<Link>>)> done);
  // connect() and wait for it (INVALID_USAGE on the loop thread).
  Result<std::shared_ptr<Link>> connect_sync(const std::string &address);

  // Runs fn on the loop thread (before returning, when called there). ABORTED after shutdown.
  Status post(std::function<void()> fn);
  // Runs fn on the loop thread every period until the transport shuts down.
  Status every(std::chrono::milliseconds period, std::function<void()> fn);

  const Logger &log() const;
  std::chrono::milliseconds connect_timeout() const;

 private:
  explicit Transport(std::shared_ptr<Core> core) : core_(std::move(core)) {}
  std::shared_ptr<Core> core_;
};

// Blocking send/recv for callers off the loop thread (INVALID_USAGE on it). If the operation has
// not completed within timeout, the link is closed with TIMEOUT (so the buffer is released) and
// that is returned.
Status send_sync(Link &link, const MessageKey &key, const void *data, size_t len,
                 std::chrono::milliseconds timeout);
Status recv_sync(Link &link, const MessageKey &key, void *data, size_t len,
                 std::chrono::milliseconds timeout);

}  // namespace wccl::net
