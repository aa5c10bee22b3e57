"""The Pythonic layer over _lib: Coordinator, Communicator, Request."""

from __future__ import annotations

import ctypes
import threading
import weakref
from ctypes import byref, c_int, c_void_p
from dataclasses import dataclass
from enum import IntEnum
from typing import Any, Callable, Dict, List, Mapping, Optional, Tuple

from . import _lib
from ._buffers import Buffer, DType, cuda_stream_of, export, synchronize_cuda
from ._lib import WcclError, check, lib


class ReduceOp(IntEnum):
    """wccl_redop_t. Integer SUM and PROD wrap; integer AVG truncates."""

    SUM = 0
    AVG = 1
    MIN = 2
    MAX = 3
    PROD = 4


class Wire(IntEnum):
    """wccl_wire_t: how F32 elements travel between members (F16 and BF16 data travel as F32 would,
    widened and rounded back once; other dtypes take NATIVE only)."""

    NATIVE = 0
    FP16 = 1
    BF16 = 2
    INT8 = 3
    INT4 = 4
    FP8 = 5
    INT2 = 6
    TOPK = 7


class Algo(IntEnum):
    """wccl_algo_t."""

    AUTO = 0
    RING = 1
    TREE = 2
    ALLGATHER = 3


class Compress(IntEnum):
    """wccl_compress_t: zstd on the wire, lossless; ZSTD for every message that shrinks, AUTO where
    this member measures that it pays (UnsupportedError in a library built without zstd)."""

    OFF = 0
    ZSTD = 1
    AUTO = 2


class Collective(IntEnum):
    """wccl_collective_t: the collectives, as wccl_opts_check and wccl_opts_for name them."""

    ALLREDUCE = 0
    BROADCAST = 1
    ALLGATHER = 2
    REDUCE_SCATTER = 3
    BARRIER = 4


class SyncMode(IntEnum):
    """wccl_sync_mode_t."""

    POPULAR = 0       # offer this member's state to the election; receive what differs
    SEND_ONLY = 1     # this member's state is the reference; it never receives
    RECEIVE_ONLY = 2  # take the elected state; never a candidate or a donor


class EpochOrigin(IntEnum):
    """wccl_epoch_origin_t: how the coordinator formed the current epoch."""

    CONTINUES = 0    # formed from the members of the one before
    FIRST = 1        # the group's first: joiners alone, the group never had a member
    AFTER_LOSS = 2   # formed by joiners alone after the group's last member was lost
    AFTER_LEAVE = 3  # formed by joiners alone after the group's last member left


@dataclass(frozen=True)
class SyncStats:
    """What a state sync did (wccl_sync_stats_t), and the revision every member now holds."""

    revision: int
    bytes_sent: int
    bytes_received: int
    sources: int
    tensors_received: int
    time_us: float
    epoch: int
    world_size: int


@dataclass(frozen=True)
class OpStats:
    """What an operation cost (wccl_op_stats_t)."""

    bytes_sent: int
    bytes_received: int
    time_us: float
    epoch: int
    world_size: int
    algo: Algo


@dataclass(frozen=True)
class CommStats:
    """What a communicator counted since it joined (wccl_comm_stats_t): operations (collectives and
    state syncs) by outcome, the payload bytes they moved (failed attempts too), epochs entered and
    successful updates."""

    ops_committed: int
    ops_failed: int
    ops_peer_lost: int
    bytes_sent: int
    bytes_received: int
    epochs: int
    updates: int


@dataclass(frozen=True)
class LinkStats:
    """One of the current epoch's links (wccl_link_stats_t): the peer's rank, the smallest round
    trip seen on it (0: not measured yet) and the highest rate it delivered while busy (0: never)."""

    rank: int
    rtt_us: int
    bytes_per_s: int


def version() -> str:
    """The loaded library's version, "MAJOR.MINOR.PATCH"."""
    text: bytes = lib.wccl_version()
    return text.decode()


def config_keys() -> List[Tuple[str, str, str, str]]:
    """Every configuration key as (key, default, accepted form, description)."""
    text: bytes = lib.wccl_config_keys()
    keys: List[Tuple[str, str, str, str]] = []
    for row in text.decode().splitlines():
        if row:
            key, default, form, description = row.split("\t", 3)
            keys.append((key, default, form, description))
    return keys


class _Config:
    """A wccl_config_t holding the defaults, the WCCL_* environment and ``settings``."""

    def __init__(self, settings: Mapping[str, Any]) -> None:
        self.handle = c_void_p()
        check(lib.wccl_config_create(byref(self.handle)))
        try:
            for key, value in settings.items():
                if isinstance(value, bool):
                    value = "on" if value else "off"
                check(lib.wccl_config_set(self.handle, str(key).encode(), str(value).encode()))
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        lib.wccl_config_destroy(self.handle)
        self.handle = c_void_p()

    def __enter__(self) -> "_Config":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Coordinator:
    """An embedded coordinator (wccl_coord_start). Keyword arguments are configuration keys, as in
    ``Coordinator(listen="127.0.0.1:0", tls=False)``; ``wccl.config_keys()`` lists them. A context
    manager: leaving the block stops it."""

    def __init__(self, **config: Any) -> None:
        self._handle = c_void_p()
        with _Config(config) as cfg:
            check(lib.wccl_coord_start(byref(self._handle), cfg.handle))

    @property
    def port(self) -> int:
        """The TCP port it listens on (0 once stopped)."""
        return lib.wccl_coord_port(self._handle) if self._handle else 0

    @property
    def http_port(self) -> int:
        """The TCP port of its HTTP endpoints (the ``http`` key: /metrics, /status,
        /status.json); 0 without them or once stopped."""
        return lib.wccl_coord_http_port(self._handle) if self._handle else 0

    def stop(self) -> None:
        """Closes every peer's connection and frees the coordinator. Idempotent."""
        handle, self._handle = self._handle, c_void_p()
        if handle:
            lib.wccl_coord_stop(handle)

    def __enter__(self) -> "Coordinator":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    def __del__(self) -> None:
        self.stop()


class Request:
    """A non-blocking operation in flight (wccl_request_t). It keeps its arrays and communicator
    alive until it is waited for; ``wait()`` returns the OpStats or raises the operation's error."""

    def __init__(self, comm: "Communicator", handle: c_void_p, buffers: List[Buffer]) -> None:
        self._comm = comm
        self._handle = handle
        self._buffers = buffers
        self._outcome: Optional[Tuple[int, OpStats]] = None
        self._lock = threading.Lock()

    def wait(self) -> OpStats:
        """Blocks until the outcome (at most the operation's timeout) and returns its statistics, or
        raises: PeerLostError (buffers as they were; update() and retry), TimeoutError, ... Calling
        it again returns or raises the same outcome."""
        with self._lock:
            if self._outcome is None:
                raw = _lib.OpStatsStruct(size=ctypes.sizeof(_lib.OpStatsStruct))
                code = lib.wccl_wait(self._handle, byref(raw))
                self._outcome = (code, OpStats(raw.bytes_sent, raw.bytes_received, raw.time_us, raw.epoch,
                                               raw.world_size, Algo(raw.algo)))
                self._free()
            code, stats = self._outcome
        try:
            check(code)
        except WcclError as e:
            e.stats = stats
            raise
        return stats

    def done(self) -> bool:
        """True once the outcome is known (wait() then returns at once). Does not block."""
        with self._lock:
            if self._outcome is not None:
                return True
            flag = c_int(0)
            lib.wccl_test(self._handle, byref(flag))  # its outcome is wait()'s to report
            return bool(flag.value)

    def _free(self) -> None:
        if self._handle:
            lib.wccl_request_free(self._handle)
            self._handle = c_void_p()
        for b in self._buffers:
            b.release()
        self._buffers = []

    def __del__(self) -> None:
        # An abandoned request is waited for by wccl_request_free; its committed result is written.
        with self._lock:
            self._free()


class Communicator:
    """A member of a wccl group (wccl_comm_t). Keyword arguments are configuration keys, as in
    ``Communicator(coordinator="host:48148", tls_cert=..., tls_key=..., tls_ca=...)``. Construction
    blocks until the coordinator admits this peer into an epoch.

    Collectives take numpy arrays (any contiguous buffer-protocol object) and torch tensors, CPU or
    CUDA, without copying them. Each returns OpStats, or a Request with ``async_op=True``. On
    PeerLostError the arrays hold what they held before the call: call ``update()`` and retry.

    A context manager: leaving the block normally leaves the group gracefully (``leave()``), and
    either way closes the communicator. Methods may be called from one thread at a time, except
    ``abort()``, which any thread may call."""

    def __init__(self, **config: Any) -> None:
        self._handle = c_void_p()
        self._requests: "weakref.WeakSet[Request]" = weakref.WeakSet()
        with _Config(config) as cfg:
            check(lib.wccl_comm_join(byref(self._handle), cfg.handle))

    # --- membership ------------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        """This peer's position in the current epoch's ring (-1 once closed)."""
        return lib.wccl_comm_rank(self._handle) if self._handle else -1

    @property
    def size(self) -> int:
        """The current epoch's number of members."""
        return lib.wccl_comm_size(self._handle) if self._handle else 0

    @property
    def epoch(self) -> int:
        """The current epoch's number."""
        return lib.wccl_comm_epoch(self._handle) if self._handle else 0

    @property
    def pending(self) -> int:
        """How many peers wait to be admitted at the next update()."""
        return lib.wccl_comm_pending(self._handle) if self._handle else 0

    @property
    def update_due(self) -> bool:
        """True when the group waits for this member's update(): its epoch was revoked, or another
        member waits at the update barrier (``wccl_comm_update_due``)."""
        return bool(lib.wccl_comm_update_due(self._handle)) if self._handle else False

    @property
    def epoch_origin(self) -> EpochOrigin:
        """How the coordinator formed the current epoch (joiners alone, after every member of the
        group was lost or left, hold none of the earlier members' state)."""
        return EpochOrigin(lib.wccl_comm_epoch_origin(self._handle) if self._handle else 0)

    def stats(self) -> CommStats:
        """The counters since join (``wccl_comm_stats``)."""
        raw = _lib.CommStatsStruct(size=ctypes.sizeof(_lib.CommStatsStruct))
        check(lib.wccl_comm_stats(self._live(), byref(raw)))
        return CommStats(raw.ops_committed, raw.ops_failed, raw.ops_peer_lost, raw.bytes_sent, raw.bytes_received,
                         raw.epochs, raw.updates)

    def links(self) -> List[LinkStats]:
        """The current epoch's links of this member, in rank order (``wccl_comm_links``)."""
        count = ctypes.c_size_t(0)
        while True:
            capacity = count.value
            raw = (_lib.LinkStatsStruct * max(capacity, 1))()
            check(lib.wccl_comm_links(self._live(), raw, capacity, byref(count)))
            if count.value <= capacity:  # (links may have come or gone between the two calls)
                return [LinkStats(r.rank, r.rtt_us, r.bytes_per_s) for r in raw[:count.value]]

    def update(self) -> None:
        """Waits for the coordinator's next epoch: survivors plus admitted joiners, minus leavers and
        lost peers. Raises CoordinatorUnreachableError while the coordinator is away."""
        check(lib.wccl_comm_update(self._live()))

    def leave(self) -> None:
        """Leaves gracefully, in place of an update; afterwards only close() is allowed."""
        check(lib.wccl_comm_leave(self._live()))

    def abort(self) -> None:
        """Any thread: every current and later wait of this communicator raises AbortedError."""
        if self._handle:
            lib.wccl_comm_abort(self._handle)

    def close(self) -> None:
        """Waits for this communicator's outstanding requests, then destroys it (the coordinator sees
        its link close; call leave() first to go gracefully). Idempotent."""
        for request in list(self._requests):
            with request._lock:
                request._free()
        handle, self._handle = self._handle, c_void_p()
        if handle:
            lib.wccl_comm_destroy(handle)

    def __enter__(self) -> "Communicator":
        return self

    def __exit__(self, exc_type: Any, *exc: Any) -> None:
        try:
            if exc_type is None and self._handle:
                self.leave()
        finally:
            self.close()

    def __del__(self) -> None:
        self.close()

    # --- collectives -----------------------------------------------------------------------------

    def allreduce(self, tensor: Any, op: ReduceOp = ReduceOp.SUM, *, out: Any = None, async_op: bool = False,
                  **opts: Any) -> Any:
        """out (default: tensor, in place) = op over every member's tensor."""
        send = export(tensor, out is None, "tensor")
        recv = export(out, True, "out") if out is not None else send
        _same_shape(send, recv, send.count, "out")
        return self._run(lib.wccl_iallreduce, (send.ptr, recv.ptr, send.count, send.dtype, op),
                         [send, recv], opts, async_op)

    def broadcast(self, tensor: Any, root: int = 0, *, async_op: bool = False, **opts: Any) -> Any:
        """tensor on every member = tensor of member ``root`` (in place)."""
        buf = export(tensor, True, "tensor")
        return self._run(lib.wccl_ibroadcast, (buf.ptr, buf.ptr, buf.count, buf.dtype, int(root)), [buf], opts,
                         async_op)

    def allgather(self, tensor: Any, out: Any, *, async_op: bool = False, **opts: Any) -> Any:
        """out (size × tensor's elements) = every member's tensor, in rank order."""
        send = export(tensor, False, "tensor")
        recv = export(out, True, "out")
        _same_shape(send, recv, send.count * self.size, "out")
        return self._run(lib.wccl_iallgather, (send.ptr, recv.ptr, send.count, send.dtype), [send, recv], opts,
                         async_op)

    def reduce_scatter(self, tensor: Any, out: Any, op: ReduceOp = ReduceOp.SUM, *, async_op: bool = False,
                       **opts: Any) -> Any:
        """tensor holds size × out's elements; member r's out = block r of their reduction."""
        send = export(tensor, False, "tensor")
        recv = export(out, True, "out")
        _same_shape(recv, send, recv.count * self.size, "tensor")
        return self._run(lib.wccl_ireduce_scatter, (send.ptr, recv.ptr, recv.count, send.dtype, op),
                         [send, recv], opts, async_op)

    def barrier(self, *, async_op: bool = False, **opts: Any) -> Any:
        """Returns once every member has called it."""
        return self._run(lib.wccl_ibarrier, (), [], opts, async_op)

    def sync_state(self, tensors: Mapping[str, Any], revision: int, mode: SyncMode = SyncMode.POPULAR) -> SyncStats:
        """Makes every member hold the same named tensors and revision (wccl_state_sync). ``tensors``
        maps names to arrays, in the same order on every member. Every member elects the same state
        (the send-only members', else the most popular (revision, tensor hashes), ties to the higher
        revision); a member receives only the tensors that differ from it, striped over every member
        holding them, written in place once everyone is done. Returns the stats with the elected
        ``revision``. InvalidUsageError (the same on every member, before data moves) names the first
        difference between the members' tensor lists. A member lost during the call is replaced by
        the remaining donors (rank, size and epoch may change); PeerLostError, with the arrays as
        they were, only when no remaining member holds a tensor some member lacks. CUDA tensors are
        hashed and sent by their GPU (after this call synchronizes their current streams)."""
        buffers = [export(array, True, f"tensor {name!r}") for name, array in tensors.items()]
        synchronize_cuda(buffers)  # the library reads them on its own streams
        try:
            names = [str(name).encode() for name in tensors]
            table = (_lib.Tensor * max(1, len(buffers)))()
            for i, (name, b) in enumerate(zip(names, buffers)):
                table[i] = _lib.Tensor(name, b.ptr, b.count, int(b.dtype), 1 if b.cuda else 0)
            rev = ctypes.c_uint64(int(revision))
            raw = _lib.SyncStatsStruct(size=ctypes.sizeof(_lib.SyncStatsStruct))
            check(lib.wccl_state_sync(self._live(), table, len(buffers), byref(rev), int(mode), byref(raw)))
        finally:
            for b in buffers:
                b.release()
        return SyncStats(rev.value, raw.bytes_sent, raw.bytes_received, raw.sources, raw.tensors_received, raw.time_us,
                         raw.epoch, raw.world_size)

    # --- plumbing ----------------------------------------------------------------------------------

    def _live(self) -> c_void_p:
        if not self._handle:
            raise _lib.error("WCCL_ERR_INVALID_USAGE", "the communicator is closed")
        return self._handle

    def _run(self, start: Callable[..., int], args: Tuple[Any, ...], buffers: List[Buffer], opts: Mapping[str, Any],
             async_op: bool) -> Any:
        options = _options(opts, cuda_stream_of(buffers))
        handle = c_void_p()
        try:
            check(start(byref(handle), *args, self._live(), byref(options)))
        except BaseException:
            for b in buffers:
                b.release()
            raise
        request = Request(self, handle, buffers)
        self._requests.add(request)
        return request if async_op else request.wait()


def wire_roundtrip(tensor: Any, wire: Wire, *, out: Any = None, topk_keep: int = 0) -> Any:
    """What ``wire`` keeps of an F32 tensor or array (encoded as one member's contribution and
    decoded again), written to ``out`` (default: in place); returns ``out``. ``topk_keep``: on the
    TOPK wire, the elements kept of each block of 256 (1..64; 0, the default, keeps 8), as the
    collectives' option of that name. For error feedback: the residual ``tensor - result`` goes
    into the next contribution. CUDA tensors (``out`` on the same GPU) are encoded and decoded by
    the GPU, bit for bit as on the CPU, after this call synchronizes their current stream."""
    send = export(tensor, out is None, "tensor")
    recv = export(out, True, "out") if out is not None else send
    try:
        _same_shape(send, recv, send.count, "out")
        if send.dtype != DType.F32:
            raise TypeError(f"wccl: wire_roundtrip takes float32 data, not {send.dtype.name}")
        synchronize_cuda([send, recv])  # the library runs on the default stream
        options = _options({"wire": wire, "topk_keep": topk_keep}, None)
        check(lib.wccl_wire_roundtrip(send.ptr, recv.ptr, send.count, byref(options)))
    finally:
        send.release()
        recv.release()
    return tensor if out is None else out


def _same_shape(a: Buffer, b: Buffer, count: int, what: str) -> None:
    if a.dtype != b.dtype:
        raise TypeError(f"wccl: {what} has dtype {b.dtype.name}, the input {a.dtype.name}")
    if b.count != count:
        raise ValueError(f"wccl: {what} holds {b.count} elements, the operation needs {count}")
    if a.cuda != b.cuda:
        raise ValueError("wccl: the input and the output must both be on the CPU or both on CUDA")


# The lowest nonzero max_link_rate, bytes per second, and the elements of each block of 256 that
# TOPK keeps where topk_keep is 0: the library's WCCL_MIN_LINK_RATE and WCCL_TOPK_DEFAULT_KEEP.
MIN_LINK_RATE: int = lib.wccl_min_link_rate()
TOPK_DEFAULT_KEEP: int = lib.wccl_topk_default_keep()

_OPTION_NAMES = ("wire", "topk_keep", "algo", "compress", "timeout", "max_link_rate")


def _options(opts: Mapping[str, Any], cuda_stream: Optional[int]) -> _lib.Opts:
    """wccl_opts_t from keyword options: wire=Wire, topk_keep=int (TOPK: elements kept of each block
    of 256, 1..64; 0: 8), algo=Algo, compress=Compress, timeout=seconds, max_link_rate=bytes per
    second each link may send the operation's messages at (None or 0: unpaced; else at least
    MIN_LINK_RATE)."""
    unknown = set(opts) - set(_OPTION_NAMES)
    if unknown:
        raise TypeError(f"wccl: unknown option(s) {', '.join(sorted(unknown))}; options are {', '.join(_OPTION_NAMES)}")
    o: _lib.Opts = lib.wccl_opts_default()
    o.wire = int(opts.get("wire", Wire.NATIVE))
    o.topk_keep = int(opts.get("topk_keep", 0))
    o.algo = int(opts.get("algo", Algo.AUTO))
    o.compress = int(opts.get("compress", Compress.OFF))
    timeout = opts.get("timeout")
    if timeout is not None:
        if not float(timeout) > 0:
            raise ValueError(f"wccl: timeout must be a positive number of seconds, not {timeout!r}")
        o.timeout_ms = max(1, round(float(timeout) * 1000))
    rate = int(opts.get("max_link_rate") or 0)
    if not 0 <= rate < 2**63:
        raise ValueError(f"wccl: max_link_rate must be 0 (unpaced) or a number of bytes per second, not {rate!r}")
    o.max_link_rate = rate
    o.cuda_stream = cuda_stream
    return o


def options_for(coll: Collective, dtype: DType, op: ReduceOp, opts: Mapping[str, Any]) -> Dict[str, Any]:
    """The keyword options an operation takes from ``opts``, meant for all of a group's operations:
    the same, with the NATIVE wire (and no topk_keep) where the library says the group's wire does
    not apply (wccl_opts_for: it applies to SUM and AVG all-reduces and reduce-scatters of the
    dtypes it carries, TOPK to the all-reduces only). Raises the library's error, which names the
    cause, for options that operation cannot take."""
    group = _options(opts, None)
    out = _lib.Opts()
    check(lib.wccl_opts_for(int(coll), int(dtype), int(op), byref(group), byref(out)))
    return {**opts, "wire": Wire(out.wire), "topk_keep": out.topk_keep}


__all__ = ["Algo", "CommStats", "Communicator", "Compress", "Coordinator", "DType", "LinkStats", "MIN_LINK_RATE", "OpStats", "ReduceOp", "Request", "SyncMode",
           "SyncStats", "TOPK_DEFAULT_KEEP", "Wire", "config_keys", "version", "wire_roundtrip"]
