"""The ``torch.distributed`` backend "wccl": a ProcessGroup whose collectives are wccl's.

``import wccl.torch`` registers it; then ``dist.init_process_group("wccl", ...)``,
``dist.new_group(backend="wccl")`` and a DeviceMesh dimension (``backend_override``) create one
wccl group per torch group. docs/python.md ("torch.distributed") is the user's guide; this module
is how it works:

- **Coordinator.** ``Options.config["coordinator"]`` or ``WCCL_COORDINATOR`` names one (a
  ``wccl-coord`` daemon, TLS with the job's certificates). Without one, rank 0 of the group runs a
  coordinator in its process (one per process, serving all its groups) and publishes its address in
  the group's store; the others read it there.
- **Configuration.** Every wccl config key comes from ``WCCL_<KEY>`` environment variables (the
  library reads them), overridden by ``Options.config``; the backend sets ``group`` (``torch-``, or
  ``WCCL_GROUP`` and ``-``, then the torch group's name), ``name`` (``rank<global rank>``, so
  errors name torch ranks), ``join_timeout_ms`` and ``op_timeout_ms`` (the group's timeout).
- **Ranks.** wccl orders its ring itself (by measured round trips), so a torch rank is not its
  wccl rank. At creation the members all-gather their torch ranks once; broadcast's root, all-gather's
  output order and reduce-scatter's input blocks are mapped through that permutation (no copy when
  it is the identity).
- **Work.** Every collective is wccl's non-blocking form. One completion thread per group waits for
  the requests in the order they were issued (the order wccl runs them), finishes them (copies out
  of staging buffers) and completes their futures, so DDP's future callbacks run without a
  ``wait()``. At most ``_MAX_IN_FLIGHT`` are outstanding; the next call waits for the oldest.
- **Faults.** A torch group has a fixed size, so a lost peer ends it: the failed operation raises
  wccl's PeerLostError (naming the lost rank), its tensors as they were, and every later call on
  the group raises an error of the same code saying that it failed earlier. Recovering means a new group (torchelastic restarts the job;
  ``wccl.torch.ElasticDeviceMesh`` and torchft re-form groups in place).
"""

from __future__ import annotations

import operator
import os
import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, TypeVar

import torch
import torch.distributed as dist
from torch._C._distributed_c10d import Store

from ._buffers import _TORCH_DTYPES, DType
from ._core import Algo, Collective, Communicator, Compress, Coordinator, ReduceOp, Request, Wire, options_for
from ._lib import AbortedError, PeerLostError, WcclError, error

_T = TypeVar("_T")
BACKEND_NAME = "wccl"
_MAX_IN_FLIGHT = 128  # wccl allows 256 requests in flight per communicator


@dataclass
class Options:
    """``pg_options`` of a wccl group (``init_process_group(..., pg_options=Options(...))``,
    ``new_group(..., pg_options=...)``, or ``backend_override={dim: ("wccl", Options(...))}``).

    ``wire`` applies where the library says a group's wire does (wccl_opts_for): to float32,
    float16 and bfloat16 SUM and AVG all-reduces and reduce-scatters (the codecs carry F32 sums,
    half data widened to F32; every other operation travels NATIVE; TOPK, which a reduce-scatter
    would re-encode, to the all-reduces only; ``topk_keep``: the elements TOPK keeps of each block
    of 256, 1..64, 0 for its default ``wccl.TOPK_DEFAULT_KEEP``);
    ``algo``, ``compress`` and ``max_link_rate`` to every operation (``max_link_rate``: bytes per
    second at which each of this member's links sends, at most, so that the group's transfers
    leave the link to other traffic; 0: unpaced, else at least ``wccl.MIN_LINK_RATE``; docs/wan.md,
    "Pacing an operation"; every operation still ends within the group's timeout, and a paced group
    measures no link rates, so AUTO picks by the configured defaults); ``config`` holds wccl config keys (``wccl.config_keys()``) over the
    ``WCCL_*`` environment."""

    wire: Wire = Wire.NATIVE
    algo: Algo = Algo.AUTO
    compress: Compress = Compress.OFF
    config: Dict[str, Any] = field(default_factory=dict)
    topk_keep: int = 0
    max_link_rate: int = 0

    def __post_init__(self) -> None:
        self.max_link_rate = operator.index(self.max_link_rate)  # an int (TypeError for a float or None)
        # The library checks them (InvalidArgumentError, a ValueError, naming the field) as the
        # group's float SUM all-reduces would take them: the operations its wire is for.
        options_for(Collective.ALLREDUCE, DType.F32, ReduceOp.SUM, self._keywords())

    def _keywords(self) -> Dict[str, Any]:
        """The options of every operation of the group, as Communicator's keyword options."""
        return {"wire": self.wire, "topk_keep": self.topk_keep, "algo": self.algo, "compress": self.compress,
                "max_link_rate": self.max_link_rate}


_REDUCE_OPS = {
    dist.ReduceOp.SUM: ReduceOp.SUM,
    dist.ReduceOp.AVG: ReduceOp.AVG,
    dist.ReduceOp.MIN: ReduceOp.MIN,
    dist.ReduceOp.MAX: ReduceOp.MAX,
    dist.ReduceOp.PRODUCT: ReduceOp.PROD,
}

_local_coordinator: Optional[Coordinator] = None
_local_coordinator_lock = threading.Lock()


def _coordinator_here(config: Mapping[str, Any]) -> str:
    """The address of this process's coordinator (started on first use): the host of ``advertise``
    if set, else MASTER_ADDR, else 127.0.0.1; TLS files as the members' (config, then WCCL_*)."""
    global _local_coordinator
    with _local_coordinator_lock:
        if _local_coordinator is None:
            keys = ("tls", "tls_cert", "tls_key", "tls_ca", "log_level", "heartbeat_ms", "peer_timeout_ms")
            _local_coordinator = Coordinator(listen="0.0.0.0:0", **{k: config[k] for k in keys if k in config})
        advertise = str(config.get("advertise") or os.environ.get("WCCL_ADVERTISE", ""))
        host = advertise.rsplit(":", 1)[0] if advertise else os.environ.get("MASTER_ADDR", "127.0.0.1")
        return f"{host}:{_local_coordinator.port}"


def _reduce_op(opts: Any) -> ReduceOp:
    """wccl's op from torch's options (AllreduceOptions, ReduceScatterOptions), a bare ReduceOp (as
    torchft passes) or None (SUM)."""
    op = dist.ReduceOp.SUM if opts is None else getattr(opts, "reduceOp", opts)
    kind = getattr(op, "op", op)
    if kind not in _REDUCE_OPS:
        name = getattr(kind, "name", None) or str(kind)  # dist.ReduceOp objects print as addresses
        raise ValueError(f"wccl: reduce op {name} is not supported (SUM, AVG, MIN, MAX and PRODUCT are)")
    return _REDUCE_OPS[kind]


class _Work(dist.Work):
    """One wccl request as a torch Work: ``wait()`` raises its error; the future completes with the
    output tensors from the group's completion thread."""

    def __init__(self, request: Optional[Request], outputs: List[torch.Tensor],
                 finish: Optional[Callable[[], object]], on_error: Callable[[BaseException], None]) -> None:
        super().__init__()
        self._request = request
        self._outputs = outputs
        self._finish = finish
        self._on_error = on_error
        # The future the work hands out is a .then() of one that always completes with the outputs:
        # a callback that raises fails its future in C++ (torch's Future.set_exception only stores
        # the exception as the value, which DDP's reducer then reads as tensors and crashes on).
        self._source: torch.futures.Future[List[torch.Tensor]] = torch.futures.Future()
        self._future: torch.futures.Future[List[torch.Tensor]] = self._source.then(self._outcome)
        self._lock = threading.RLock()  # a future's callback may wait on its own work
        self._completing = False
        self._error: Optional[BaseException] = None
        self._done = threading.Event()

    def _complete(self) -> None:
        """Waits for the request and finishes the work once; both threads may call it. As gloo's,
        the work is done once its future has completed and run its callbacks (torchft chains its
        own onto the future right after wait() returns, and needs it completed by then)."""
        with self._lock:
            if self._done.is_set() or self._completing:
                return  # done, or a callback of this very completion waits on it
            self._completing = True
            try:
                if self._request is not None:
                    self._request.wait()
                if self._finish is not None:
                    self._finish()  # copies on this thread's stream: done before the future completes
                    for t in self._outputs:
                        if t.is_cuda:
                            torch.cuda.current_stream(t.device).synchronize()
                            break
            except BaseException as e:  # the operation's outcome, reported by wait() and the future
                self._error = e
                self._on_error(e)
            self._request = None
            try:
                self._source.set_result(self._outputs)  # runs _outcome: the future completes
            finally:
                self._done.set()

    def _outcome(self, source: torch.futures.Future[List[torch.Tensor]]) -> List[torch.Tensor]:
        if self._error is not None:
            raise self._error
        return source.value()

    def wait(self, timeout: timedelta = timedelta(0)) -> bool:
        """Raises the operation's error; a positive ``timeout`` raises TimeoutError once it passes
        (the operation goes on, bounded by the group's timeout)."""
        seconds = timeout.total_seconds() if timeout else 0.0
        if seconds <= 0:
            self._complete()
        elif not self._done.wait(seconds):  # the completion thread finishes it
            raise error("WCCL_ERR_TIMEOUT", f"the operation did not complete within {seconds:g} s")
        if self._error is not None:
            raise self._error
        return True

    def is_completed(self) -> bool:
        return self._done.is_set()

    def is_success(self) -> bool:
        return self._done.is_set() and self._error is None

    def exception(self) -> Optional[BaseException]:
        return self._error

    def get_future(self) -> torch.futures.Future[List[torch.Tensor]]:
        return self._future


class ProcessGroupWccl(dist.ProcessGroup):
    """A torch process group over one wccl communicator (module docstring: how it maps)."""

    def __init__(self, store: Store, rank: int, size: int, timeout: timedelta, *, group_name: str = "default",
                 global_rank: Optional[int] = None, options: Optional[Options] = None) -> None:
        super().__init__(rank, size)  # type: ignore[call-arg]  # the (rank, size) constructor, not in torch's stub
        self._group_name = group_name
        self._options = options or Options()
        self._opts_for: Dict[Any, Dict[str, Any]] = {}  # _opts() by (collective, op, dtype)
        config: Dict[str, Any] = dict(self._options.config)
        if not (config.get("coordinator") or os.environ.get("WCCL_COORDINATOR")):
            if rank == 0:
                store.set("wccl/coordinator", _coordinator_here(config))
            config["coordinator"] = store.get("wccl/coordinator").decode()
        config.setdefault("group", f"{os.environ.get('WCCL_GROUP', 'torch')}-{group_name}")
        config.setdefault("name", f"rank{rank if global_rank is None else global_rank}")
        for key in ("join_timeout_ms", "op_timeout_ms"):  # admission, and the membership calls
            config.setdefault(key, max(1, int(timeout.total_seconds() * 1000)))
        self._timeout = timeout.total_seconds()
        self._completer: Optional[threading.Thread] = None
        self._comm = Communicator(**config)
        self._failed: Optional[BaseException] = None
        try:
            self._form(rank, size)
        except BaseException:
            self._comm.close()
            raise
        self._pending: "queue.Queue[Optional[_Work]]" = queue.Queue(maxsize=_MAX_IN_FLIGHT)
        self._completer = threading.Thread(target=self._complete_in_order, name="wccl-pg", daemon=True)
        self._completer.start()

    def _form(self, rank: int, size: int) -> None:
        """Waits until every torch rank is a member (the coordinator may have formed the first epoch
        before all had joined), then learns which wccl rank each torch rank has."""
        deadline = time.monotonic() + self._timeout
        while self._comm.size < size:
            if time.monotonic() > deadline:
                raise error("WCCL_ERR_TIMEOUT", f"{self._comm.size} of the torch group's {size} ranks joined "
                                                f"within its timeout ({self._timeout:g} s)")
            self._comm.update()
        if self._comm.size > size:
            raise error("WCCL_ERR_INVALID_USAGE", f"the wccl group has {self._comm.size} members for a torch group of "
                                                  f"{size}: another job uses the same coordinator and group name")
        ranks = torch.empty(size, dtype=torch.int64)
        self._comm.allgather(torch.tensor([rank], dtype=torch.int64), ranks)
        self._torch_rank: List[int] = ranks.tolist()  # by wccl rank
        if sorted(self._torch_rank) != list(range(size)):
            raise error("WCCL_ERR_INVALID_USAGE", f"the group's members hold torch ranks {self._torch_rank}, not each "
                                                  f"of 0..{size - 1} once: another job uses the same coordinator and group name")
        self._wccl_rank = [0] * size
        for w, t in enumerate(self._torch_rank):
            self._wccl_rank[t] = w
        self._identity = self._torch_rank == list(range(size))

    # --- plumbing ----------------------------------------------------------------------------------

    def _complete_in_order(self) -> None:
        while True:
            work = self._pending.get()
            if work is None:
                return
            work._complete()

    def _failure(self, cause: BaseException) -> None:
        if self._failed is None:
            self._failed = cause

    def _submit(self, start: Callable[[], Optional[Request]], outputs: List[torch.Tensor],
                finish: Optional[Callable[[], object]] = None) -> _Work:
        if self._failed is not None:
            name = getattr(self._failed, "name", "") or "WCCL_ERR_INVALID_USAGE"
            raise error(name, f"the group failed earlier and cannot be used again (create a new one): {self._failed}")
        try:
            request = start()
        except (PeerLostError, AbortedError) as e:  # the epoch was revoked before the call: the group is lost
            self._failure(e)
            raise
        work = _Work(request, outputs, finish, self._failure)
        self._pending.put(work)
        return work

    def _opts(self, coll: Collective, op: ReduceOp = ReduceOp.SUM,
              dtype: torch.dtype = torch.float32) -> Dict[str, Any]:
        """The operation's options: the group's, with the wire the library gives it (wccl_opts_for:
        the group's on the SUM and AVG reductions the wire carries, else NATIVE), and the group's
        timeout. Asked once per kind of operation. A dtype wccl lacks gets the NATIVE options
        (exporting the tensor then raises its TypeError)."""
        key = (coll, op, dtype)
        opts = self._opts_for.get(key)
        if opts is None:
            wccl_dtype = _TORCH_DTYPES.get(str(dtype))
            group = self._options._keywords()
            opts = (options_for(coll, wccl_dtype, op, group) if wccl_dtype is not None
                    else {**group, "wire": Wire.NATIVE, "topk_keep": 0})
            opts["timeout"] = self._timeout
            self._opts_for[key] = opts
        return opts

    @staticmethod
    def _one(items: Sequence[_T], what: str) -> _T:
        if len(items) != 1:
            raise ValueError(f"wccl: {what} takes one tensor (list) per process, not {len(items)}")
        return items[0]

    # --- the ProcessGroup interface ----------------------------------------------------------------

    def getBackendName(self) -> str:  # noqa: N802 (torch's name)
        return BACKEND_NAME

    def getGroupName(self) -> str:  # noqa: N802 (torch's; its default reads a C++ backend this group has not)
        return self._group_name

    def shutdown(self) -> None:
        """destroy_process_group: waits for the outstanding operations, leaves the wccl group
        gracefully (as every rank does: the members' leave is one decision, bounded by the group's
        timeout) unless it failed, and closes the communicator."""
        self._close(graceful=True)

    def abort(self) -> None:
        """Operations in flight fail with AbortedError, so do later calls, and the communicator
        closes (torchft aborts the previous quorum's group before it configures the next)."""
        self._comm.abort()
        self._failure(error("WCCL_ERR_ABORTED", "the group was aborted"))
        self._close(graceful=False)

    def _close(self, graceful: bool) -> None:
        if self._completer is not None:
            self._pending.put(None)
            self._completer.join()
            self._completer = None
        try:
            if graceful and self._failed is None:
                self._comm.leave()
        except WcclError:
            pass  # a rank gone meanwhile: closing is all that is left
        finally:
            self._comm.close()

    def allreduce(self,  # type: ignore[override]  # the C++ form the trampoline calls
                tensors: List[torch.Tensor], opts: Any = None) -> _Work:
        t = self._one(tensors, "all_reduce")
        op = _reduce_op(opts)
        buf = t if t.is_contiguous() else t.contiguous()
        finish = None if buf is t else (lambda: t.copy_(buf))
        return self._submit(
            lambda: self._comm.allreduce(buf, op, async_op=True, **self._opts(Collective.ALLREDUCE, op, t.dtype)),
            [t], finish)

    def allreduce_coalesced(self, tensors: List[torch.Tensor], opts: Any = None) -> _Work:
        if len({t.dtype for t in tensors}) != 1 or len({t.device for t in tensors}) != 1:
            raise ValueError("wccl: all_reduce_coalesced takes tensors of one dtype on one device")
        op = _reduce_op(opts)
        flat = torch.cat([t.reshape(-1) for t in tensors])

        def finish() -> None:
            offset = 0
            for t in tensors:
                t.copy_(flat[offset:offset + t.numel()].view_as(t))
                offset += t.numel()

        return self._submit(
            lambda: self._comm.allreduce(flat, op, async_op=True, **self._opts(Collective.ALLREDUCE, op, flat.dtype)),
            tensors, finish)

    def broadcast(self,  # type: ignore[override]  # the C++ form the trampoline calls
                tensors: List[torch.Tensor], opts: Any = None) -> _Work:
        t = self._one(tensors, "broadcast")
        src = opts.rootRank if opts is not None else 0
        if not 0 <= src < self.size():
            raise ValueError(f"wccl: broadcast from rank {src} in a group of {self.size()} (ranks 0..{self.size() - 1})")
        root = self._wccl_rank[src]
        buf = t if t.is_contiguous() else t.contiguous()
        finish = None if buf is t else (lambda: t.copy_(buf))
        return self._submit(
            lambda: self._comm.broadcast(buf, root, async_op=True, **self._opts(Collective.BROADCAST, dtype=t.dtype)),
            [t], finish)

    def allgather(self,  # type: ignore[override]  # the C++ form the trampoline calls
                output_tensors: List[List[torch.Tensor]], input_tensors: List[torch.Tensor],
                  opts: Any = None) -> _Work:
        t = self._one(input_tensors, "all_gather").contiguous()
        outs = self._one(output_tensors, "all_gather")
        if len(outs) != self.size() or any(o.numel() != t.numel() or o.dtype != t.dtype for o in outs):
            raise ValueError(f"wccl: all_gather needs {self.size()} output tensors of {t.numel()} {t.dtype} elements")
        gathered = torch.empty((self.size(), t.numel()), dtype=t.dtype, device=t.device)

        def finish() -> None:
            for w, torch_rank in enumerate(self._torch_rank):
                outs[torch_rank].copy_(gathered[w].view_as(outs[torch_rank]))

        return self._submit(
            lambda: self._comm.allgather(t, gathered, async_op=True, **self._opts(Collective.ALLGATHER, dtype=t.dtype)),
            outs, finish)

    def all_gather_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> _Work:
        t = input.contiguous()
        if output.numel() != t.numel() * self.size() or output.dtype != t.dtype:
            raise ValueError(f"wccl: all_gather_into_tensor needs an output of {t.numel() * self.size()} {t.dtype} "
                             f"elements, not {output.numel()} {output.dtype}")
        if self._identity and output.is_contiguous():
            return self._submit(
                lambda: self._comm.allgather(t, output, async_op=True, **self._opts(Collective.ALLGATHER, dtype=t.dtype)),
                [output])
        gathered = torch.empty((self.size(), t.numel()), dtype=t.dtype, device=t.device)

        def finish() -> None:
            rows = output.view(self.size(), t.numel())  # output's blocks in torch rank order
            rows[self._torch_rank] = gathered

        return self._submit(
            lambda: self._comm.allgather(t, gathered, async_op=True, **self._opts(Collective.ALLGATHER, dtype=t.dtype)),
            [output], finish)

    def reduce_scatter(self,  # type: ignore[override]  # the C++ form the trampoline calls
                output_tensors: List[torch.Tensor], input_tensors: List[List[torch.Tensor]],
                       opts: Any = None) -> _Work:
        out = self._one(output_tensors, "reduce_scatter")
        blocks = self._one(input_tensors, "reduce_scatter")
        if len(blocks) != self.size():
            raise ValueError(f"wccl: reduce_scatter needs {self.size()} input tensors, not {len(blocks)}")
        flat = torch.cat([blocks[t].reshape(-1) for t in self._torch_rank])  # in wccl rank order
        return self._reduce_scatter(out, flat, opts)

    def reduce_scatter_single(self, output: torch.Tensor, input: torch.Tensor, opts: Any = None) -> _Work:
        if input.numel() != output.numel() * self.size():
            raise ValueError(f"wccl: reduce_scatter_tensor needs an input of {output.numel() * self.size()} elements, "
                             f"not {input.numel()}")
        flat = input.contiguous().view(self.size(), output.numel())
        if not self._identity:
            flat = flat[self._torch_rank]  # block w goes to wccl rank w
        return self._reduce_scatter(output, flat.reshape(-1), opts)

    def _reduce_scatter(self, out: torch.Tensor, flat: torch.Tensor, opts: Any) -> _Work:
        op = _reduce_op(opts)
        buf = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
        finish = None if buf is out else (lambda: out.copy_(buf))
        return self._submit(
            lambda: self._comm.reduce_scatter(flat, buf, op, async_op=True,
                                              **self._opts(Collective.REDUCE_SCATTER, op, flat.dtype)),
            [out], finish)

    # The names torch before 2.13 calls all_gather_into_tensor and reduce_scatter_tensor by.
    _allgather_base = all_gather_single
    _reduce_scatter_base = reduce_scatter_single  # type: ignore[assignment]  # opts: Any

    def barrier(self, opts: Any = None) -> _Work:
        return self._submit(lambda: self._comm.barrier(async_op=True, **self._opts(Collective.BARRIER)), [])


def create(backend_opts: Any, pg_options: Optional[Options]) -> ProcessGroupWccl:
    """The creator ``dist.Backend.register_backend`` calls (extended API)."""
    if pg_options is not None and not isinstance(pg_options, Options):
        raise TypeError(f"wccl: pg_options must be wccl.torch.Options, not {type(pg_options).__name__}")
    ranks = list(backend_opts.global_ranks_in_group or [])
    rank = backend_opts.group_rank
    return ProcessGroupWccl(backend_opts.store, rank, backend_opts.group_size, backend_opts.timeout,
                            group_name=str(backend_opts.group_id), global_rank=ranks[rank] if ranks else rank,
                            options=pg_options)


def register() -> None:
    """Registers backend "wccl" with torch.distributed (idempotent)."""
    if BACKEND_NAME.upper() not in dist.Backend._plugins:
        dist.Backend.register_backend(BACKEND_NAME, create, extended_api=True, devices=["cpu", "cuda"])
