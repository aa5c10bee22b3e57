// Internal: one TCP connection of a link: the receive state machine, the write window, and the TLS
// engine if any. The TLS handshake and the hellos are TLS records, through the engine; after them,
// data frames are plaintext or sealed (net/seal.h), and neither is copied: the kernel reads a
// plaintext payload from the sender's buffer (a sealed one from the buffer it is sealed into),
// and large payloads are read straight into the receiver's buffer (and opened there). Loop thread
// only.
#pragma once

#include <uv.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "net/frame.h"
#include "net/link.h"
#include "net/seal.h"
#include "net/tls.h"

namespace wccl::net {

class Core;
class LinkState;
struct SendOp;
struct WriteReq;

class Stream {
 public:
  Stream(Core *core, bool is_server) : core_(core), is_server_(is_server) { tcp_.data = this; }

  enum class Phase { kConnecting, kHandshake, kHello, kOpen, kClosed };
  enum class Rx { kHeader, kAwaitDest, kPayload, kTag };

  // The connection is up (connected or accepted): TLS handshake first, or hello straight away.
  void start_after_connect();
  // A receive was posted for the frame this stream is parked on.
  void resume();
  // Writes one data frame of op (a tag for frame_sent); payload must outlive the write.
  Status write_frame(const FrameHeader &h, const uint8_t *payload, SendOp *op);
  // Fails the stream's link, or (a stream in set-up) logs and closes the stream.
  void fail(Status why);
  // reset: with a TCP reset (a refusal the peer can tell from a closed connection).
  void close(bool reset = false);
  bool mid_frame() const {
    return rx_ == Rx::kPayload || rx_ == Rx::kTag || (rx_ == Rx::kHeader && hdr_got_ > 0);
  }
  // Waiting for a receive of the frame it has begun (reading stopped).
  bool parked() const { return rx_ == Rx::kAwaitDest; }
  // Data is in flight on this connection and the peer's kernel has acknowledged nothing for at
  // least `limit`: a dead host or a cut path. A receiver that is alive but has not posted its
  // receive holds a zero window, with nothing in flight, so it never counts.
  bool unacknowledged_for(std::chrono::milliseconds limit) const;
  // The peer certificate's subject; "" for plaintext.
  std::string peer_subject() const;

  uv_tcp_t tcp_{};
  Core *core_;
  const bool is_server_;
  LinkState *link_ = nullptr;
  int index_ = 0;
  Phase phase_ = Phase::kConnecting;
  Clock::time_point deadline_{};  // pending (server) streams only
  std::string host_;              // pending (server) streams only: the peer's address
  bool heard_ = false;            // any byte arrived from the peer
  bool reset_ = false;            // the peer reset the connection (RST)
  bool ended_ = false;            // the peer closed it between frames; all it sent was read
  std::function<void(std::shared_ptr<Link>)> on_link_;  // pending (server) streams only
  std::string peer_;
  size_t tx_in_flight_ = 0;
  bool closing_ = false;

 private:
  static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
  static void on_read(uv_stream_t *h, ssize_t nread, const uv_buf_t *buf);
  static void on_write(uv_write_t *req, int status);
  void start_reading();
  void stop_reading();
  void process();
  Result<size_t> read_staged(uint8_t *dst, size_t max);
  std::pair<uint8_t *, size_t> rx_target();
  void rx_advance(size_t n);
  void begin_data();
  void payload_complete();
  void frame_complete();
  // The bytes on the connection are TLS records (the handshake and the hellos) and go through the
  // engine; after the peer's hello, data frames are sealed (net/seal.h) or plaintext.
  bool records() const { return tls_ != nullptr && phase_ != Phase::kOpen; }
  bool handshake_step();
  void send_hello();
  Status write(std::unique_ptr<WriteReq> req, size_t head_len, const uint8_t *payload, size_t len);
  Status flush(std::unique_ptr<WriteReq> req);
  Status submit(std::unique_ptr<WriteReq> req, const uv_buf_t *bufs, unsigned nbufs);

  std::unique_ptr<TlsEngine> tls_;   // null for plaintext
  std::unique_ptr<FrameSeal> seal_;  // TLS: the data frames' keys, from the handshake on
  uint8_t tag_[FrameSeal::kTagBytes] = {};
  size_t tag_got_ = 0;
  std::vector<std::vector<uint8_t>> spare_ciphers_;  // sealed frames' buffers, for reuse
  bool reading_ = false;
  Rx rx_ = Rx::kHeader;
  uint8_t hdr_[kFrameHeaderBytes] = {};
  size_t hdr_got_ = 0;
  FrameHeader cur_;
  uint8_t *dst_ = nullptr;
  size_t left_ = 0;
  uint8_t hello_buf_[kMaxHelloBytes] = {};
  std::unique_ptr<uint8_t[]> staging_;
  size_t staging_off_ = 0, staging_len_ = 0;
  bool direct_read_ = false;   // the socket read goes to the payload's place, not staging
  bool large_frames_ = false;  // the last data frame's payload could be read directly
};

}  // namespace wccl::net
