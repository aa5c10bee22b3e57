#include "algo/payload.h"

#include <vector>

namespace wccl::algo {
namespace {

// Host memory for a topology's regions, laid out back to back.
class Regions {
 public:
  // Region i holds count_of(i) elements of bytes_of(count) bytes.
  Status allocate(Memory &mem, size_t regions, const std::function<size_t(size_t)> &count_of,
                  const std::function<size_t(size_t)> &bytes_of) {
    offset_.assign(regions + 1, 0);
    for (size_t i = 0; i < regions; ++i) offset_[i + 1] = offset_[i] + bytes_of(count_of(i));
    return mem.host_bytes(offset_.back(), &bytes_);
  }
  uint8_t *at(size_t i) { return bytes_.get() + offset_[i]; }
  size_t len(size_t i) const { return offset_[i + 1] - offset_[i]; }
  // Region i's bytes, sent as they are; and a pipeline step landing them there, then `then`.
  Status send(Pipeline &pipe, size_t slot, int peer, uint32_t tag, size_t i) {
    return pipe.out().send(slot, peer, tag, at(i), len(i), /*from_buffer=*/false);
  }
  void land(Pipeline &pipe, int peer, uint32_t tag, size_t i, std::function<Status()> then) {
    pipe.land(peer, tag, at(i), len(i), /*in_buffer=*/false, kNoSlot,
              [then = std::move(then)](const uint8_t *) { return then(); });
  }

 private:
  std::vector<size_t> offset_;
  Bytes bytes_;
};

class NativePayload final : public Payload {
 public:
  NativePayload(Pipeline &pipe, codec::Dtype t, codec::RedOp op)
      : pipe_(pipe), mem_(pipe.memory()), t_(t), op_(op), es_(codec::dtype_size(t)) {}

  Status plan(size_t, const std::function<size_t(size_t)> &, Carry) override { return Status(); }
  size_t wire_len(size_t count) const override { return count * es_; }

  Status send_partial(size_t slot, int peer, uint32_t tag, const void *src, size_t count, size_t,
                      size_t) override {
    return pipe_.out().send(slot, peer, tag, src, count * es_, /*from_buffer=*/true);
  }
  Status combine(void *acc, const void *mine, const uint8_t *got, size_t count) override {
    WCCL_RETURN_IF_ERROR(will_write(acc, count));
    return mem_.reduce_into(t_, op_, acc, mine, got, count);
  }
  Status make_final(void *value, const void *src, size_t count, size_t, size_t) override {
    if (value == src) return Status();
    WCCL_RETURN_IF_ERROR(will_write(value, count));
    return mem_.copy(value, src, count * es_);
  }
  Status send_final(size_t slot, int peer, uint32_t tag, const void *value, size_t count,
                    size_t) override {
    return pipe_.out().send(slot, peer, tag, value, count * es_, /*from_buffer=*/true);
  }
  void land_final(int peer, uint32_t tag, void *value, size_t count, size_t, size_t gate,
                  std::function<Status()> then) override {
    pipe_.land(peer, tag, static_cast<uint8_t *>(value), count * es_, /*in_buffer=*/true, gate,
               [then = std::move(then)](const uint8_t *) { return then(); });
  }

  Status plan_kept(size_t regions, const std::function<size_t(size_t)> &count_of) override {
    return kept_.allocate(mem_, regions, count_of, [this](size_t count) { return count * es_; });
  }
  Status keep(const void *src, size_t count, size_t, size_t region) override {
    return mem_.to_host(kept_.at(region), src, count * es_);
  }
  Status send_kept(size_t slot, int peer, uint32_t tag, size_t region) override {
    return kept_.send(pipe_, slot, peer, tag, region);
  }
  void land_kept(int peer, uint32_t tag, size_t region, std::function<Status()> then) override {
    kept_.land(pipe_, peer, tag, region, std::move(then));
  }
  Status combine_kept(void *acc, size_t count, size_t region, bool first) override {
    WCCL_RETURN_IF_ERROR(will_write(acc, count));
    if (first) return mem_.from_host(acc, kept_.at(region), count * es_);
    return mem_.reduce_into(t_, op_, acc, acc, kept_.at(region), count);
  }

 private:
  Status will_write(void *at, size_t count) { return pipe_.will_write(at, count * es_); }

  Pipeline &pipe_;
  Memory &mem_;
  const codec::Dtype t_;
  const codec::RedOp op_;
  const size_t es_;
  Regions kept_;
};

class CodedPayload final : public Payload {
 public:
  CodedPayload(Pipeline &pipe, codec::Wire w, codec::RedOp op)
      : pipe_(pipe), mem_(pipe.memory()), w_(w), op_(op) {}

  Status plan(size_t regions, const std::function<size_t(size_t)> &count_of, Carry carry) override {
    if (carry != Carry::kFinals)
      WCCL_RETURN_IF_ERROR(partials_.allocate(mem_, regions, count_of, wire_bytes()));
    if (carry != Carry::kPartials)
      WCCL_RETURN_IF_ERROR(finals_.allocate(mem_, regions, count_of, wire_bytes()));
    return Status();
  }
  size_t wire_len(size_t count) const override { return codec::wire_size(w_, count); }

  Status send_partial(size_t slot, int peer, uint32_t tag, const void *src, size_t count,
                      size_t first, size_t region) override {
    WCCL_RETURN_IF_ERROR(
        mem_.encode(w_, static_cast<const float *>(src), count, partials_.at(region), first));
    return pipe_.out().send(slot, peer, tag, partials_.at(region), partials_.len(region),
                            /*from_buffer=*/false);
  }
  Status combine(void *acc, const void *mine, const uint8_t *got, size_t count) override {
    WCCL_RETURN_IF_ERROR(will_write(acc, count));
    return mem_.decode_reduce(w_, op_, got, wire_len(count), count, static_cast<float *>(acc),
                              static_cast<const float *>(mine));
  }
  // Encoded once; this peer keeps what decodes from its own bytes, as every receiver will.
  Status make_final(void *value, const void *src, size_t count, size_t first,
                    size_t region) override {
    WCCL_RETURN_IF_ERROR(
        mem_.encode(w_, static_cast<const float *>(src), count, finals_.at(region), first));
    WCCL_RETURN_IF_ERROR(will_write(value, count));
    return mem_.decode(w_, finals_.at(region), finals_.len(region), count,
                       static_cast<float *>(value));
  }
  Status send_final(size_t slot, int peer, uint32_t tag, const void *, size_t,
                    size_t region) override {
    return pipe_.out().send(slot, peer, tag, finals_.at(region), finals_.len(region),
                            /*from_buffer=*/false);
  }
  void land_final(int peer, uint32_t tag, void *value, size_t count, size_t region, size_t,
                  std::function<Status()> then) override {
    // Into the region, which nothing else writes: no gate.
    pipe_.land(peer, tag, finals_.at(region), finals_.len(region), /*in_buffer=*/false, kNoSlot,
               [this, value, count, region, then = std::move(then)](const uint8_t *) {
                 WCCL_RETURN_IF_ERROR(will_write(value, count));
                 WCCL_RETURN_IF_ERROR(mem_.decode(w_, finals_.at(region), finals_.len(region),
                                                  count, static_cast<float *>(value)));
                 return then();
               });
  }

  // Kept contributions live in the finals' regions: each is encoded once, by its member.
  Status plan_kept(size_t regions, const std::function<size_t(size_t)> &count_of) override {
    return finals_.allocate(mem_, regions, count_of, wire_bytes());
  }
  Status keep(const void *src, size_t count, size_t first, size_t region) override {
    return mem_.encode(w_, static_cast<const float *>(src), count, finals_.at(region), first);
  }
  Status send_kept(size_t slot, int peer, uint32_t tag, size_t region) override {
    return finals_.send(pipe_, slot, peer, tag, region);
  }
  void land_kept(int peer, uint32_t tag, size_t region, std::function<Status()> then) override {
    finals_.land(pipe_, peer, tag, region, std::move(then));
  }
  Status combine_kept(void *acc, size_t count, size_t region, bool first) override {
    WCCL_RETURN_IF_ERROR(will_write(acc, count));
    auto *dst = static_cast<float *>(acc);
    if (first) return mem_.decode(w_, finals_.at(region), finals_.len(region), count, dst);
    return mem_.decode_reduce(w_, op_, finals_.at(region), finals_.len(region), count, dst, dst);
  }

 private:
  Status will_write(void *at, size_t count) { return pipe_.will_write(at, count * sizeof(float)); }
  std::function<size_t(size_t)> wire_bytes() const {
    return [w = w_](size_t count) { return codec::wire_size(w, count); };
  }

  Pipeline &pipe_;
  Memory &mem_;
  const codec::Wire w_;
  const codec::RedOp op_;
  Regions partials_, finals_;
};

}  // namespace

std::unique_ptr<Payload> make_payload(Pipeline &pipe, codec::Wire w, codec::Dtype t,
                                      codec::RedOp op) {
  if (w.kind == codec::WireKind::kNative) return std::make_unique<NativePayload>(pipe, t, op);
  return std::make_unique<CodedPayload>(pipe, w, op);
}

}  // namespace wccl::algo
