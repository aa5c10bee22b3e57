// A link between two peers, each made of `streams` TCP connections (TLS 1.3 unless tls=off),
// carrying messages identified by a MessageKey: the handle the layers above use. The Transport
// (net/transport.h) opens and accepts links; docs/protocol.md specifies the wire.
//
// Threading. Link::send, Link::recv and Link::close may be called from any thread, including from
// a completion callback; they hand the work to the transport's loop thread and return at once.
// Completion callbacks run on the loop thread, each exactly once, after the link's state is
// consistent; they must not block, and an exception they throw is logged and dropped. An error
// *returned* by send/recv/close means the call did nothing and its callback will not run.
//
// Messages. A message is cut into one frame per stream (frames of at most frame_bytes, and of at
// least 16 KiB where the message is that long), striped over the link's streams (whichever stream
// has room in its write window takes the next frame) and reassembled by offset
// straight into the receiver's buffer. A receive names the key of the message it wants; frames of
// a message nobody has asked for yet stop that stream's reading until someone does, so a slow
// receiver slows the sender through TCP and memory stays bounded. Frames go out in the order the
// sends execute on the loop thread, so a receiver that posts its receives in a fixed order must
// get the messages in that order: a message queued behind one nobody has asked for yet waits.
//
// Failure. Any error on any stream fails the whole link: every pending operation completes with
// that status (IO for a closed or reset connection, TIMEOUT, PROTOCOL, AUTH), and so does every
// later one. Other links are unaffected. A peer that closes (or resets) the link between frames
// closes its streams one by one, each behind what it had written: the first stream to end fails
// every send (the peer reads nothing more), and the link fails once each stream has ended or is
// parked on a message nobody has asked for, after the completions already due have run, and at
// most io_timeout_ms after the first end. So every message whose send completed before the peer
// closed arrives, if its receive is posted by then (completion callbacks post in time).
// Timeouts: the whole set-up (connect, TLS handshake, hello on every stream) must finish within
// connect_timeout_ms; once a frame or message has started to arrive, a silence of io_timeout_ms
// fails the link; data in flight that the peer's kernel does not acknowledge for io_timeout_ms
// fails it too (a dead host, a cut path). Waiting for a message that has not started, or for a
// live peer to post its receive (a zero window), is not a transport failure: the layers above
// bound those waits.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "core/status.h"
#include "net/frame.h"

namespace wccl::net {

using Completion = std::function<void(Status)>;
using Clock = std::chrono::steady_clock;

struct LinkStats {
  uint64_t bytes_sent = 0;      // payload bytes whose write completed
  uint64_t bytes_received = 0;  // payload bytes placed into receive buffers
};

// Only the transport makes links (its loop-thread state implements this interface); the layers
// above hold them as std::shared_ptr<Link>.
class Link {
 public:
  virtual ~Link() = default;
  Link(const Link &) = delete;
  Link &operator=(const Link &) = delete;

  // Sends len bytes at data as the message `key`. data must stay valid and unchanged until done
  // runs. OK in done means every byte was handed to the kernel (not that the peer received it).
  virtual Status send(const MessageKey &key, const void *data, size_t len, Completion done) = 0;
  // Receives the message `key` into data, which must be exactly the message's length (a message
  // of another length fails the link with PROTOCOL). A second receive of a key already waiting
  // completes with INVALID_USAGE. On failure data may hold part of the message.
  Status recv(const MessageKey &key, void *data, size_t len, Completion done) {
    return recv(key, data, len, nullptr, std::move(done));
  }
  // The same into a buffer of capacity len: a message of at most len bytes is accepted (a longer
  // one fails the link with PROTOCOL) and *got holds its length before done runs OK.
  virtual Status recv(const MessageKey &key, void *data, size_t len, size_t *got,
                      Completion done) = 0;
  // Fails the link with `why` (ABORTED if why is OK): pending operations complete with it.
  virtual void close(Status why = Status()) = 0;
  // Runs fn once, as a completion, with the status the link fails with (see Failure above; ABORTED
  // or close's `why` when closed here): at once if it has already failed. How the layers above
  // learn that a link they are not using broke.
  virtual Status on_close(Completion fn) = 0;
  // Runs fn on the link's loop thread, in order with the other work posted there (before
  // returning, when called on that thread).
  virtual Status run(std::function<void()> fn) = 0;
  // Caps the rate at which the link sends, in bytes per second (0: as fast as TCP goes): the
  // kernel paces each stream at its share (SO_MAX_PACING_RATE; at least 31250 bytes/s each), from
  // the next packet on, bytes already written included. Any thread: the link ends at the rate of
  // the last call; a rate equal to the last one asked for costs nothing. While paced, the link
  // takes no delivery_rate samples (they would measure the cap).
  virtual void pace(uint64_t bytes_per_s) = 0;

  // Set on the loop thread before the link is handed out; stable afterwards.
  virtual const std::string &peer_name() const = 0;     // from the peer's hello
  virtual const std::string &peer_subject() const = 0;  // certificate subject, "" if tls=off
  virtual const std::string &peer_address() const = 0;
  // This side's IP address on the link's first connection (as the peer sees it, NAT aside).
  virtual const std::string &local_host() const = 0;
  virtual int stream_count() const = 0;
  virtual LinkStats stats() const = 0;
  // What the kernel measured on the link's streams (net/tcp_info.h), sampled when the link opens
  // and again as frames are sent: at most once a second, or every kSampleInterval while a message
  // goes out that every stream carries a share of, of at least kRateMessageBytes.
  // min_rtt_us: the smallest round trip in microseconds, 0 if unknown. delivery_rate: the highest
  // rate, in bytes per second, at which the link's streams together had data acknowledged,
  // sampled while such a message went out (so while every stream was busy), 0 if none did.
  virtual uint32_t min_rtt_us() const = 0;
  virtual uint64_t delivery_rate() const = 0;
  static constexpr std::chrono::milliseconds kSampleInterval{100};
  static constexpr size_t kRateMessageBytes = 256 << 10;
  // True on the transport's I/O thread (inside completion callbacks).
  virtual bool on_loop_thread() const = 0;

 protected:
  Link() = default;
};

}  // namespace wccl::net
