"""wccl for torch trainers: the ``torch.distributed`` backend "wccl" (registered on import; it lives
in _torch_backend.py, with ``Options`` for ``pg_options``), and the ElasticDeviceMesh of a hybrid
FSDP + DiLoCo job.

A node runs L local ranks (one per GPU, or processes on a CPU), started the way torch users start
them (``torchrun --nproc-per-node L``), so ``torch.distributed`` is initialised over the node. The
mesh has two dimensions:

- **local**: the node's L ranks, an ordinary ``torch.distributed`` group (NCCL on GPUs, gloo on
  CPUs), for FSDP2 inside the node;
- **global**: one wccl communicator per local rank, in group ``<prefix><local rank>``, so that
  shard r of every node is averaged with shard r of every other node, over TLS.

The mesh keeps one invariant: **every local rank of a node works with the same set of nodes**
(docs/trainer.md, "Membership"):

1. The coordinator admits, lets go and loses the node whole: each rank's communicator names the
   node (``node``) and its L groups (``node_groups``), so the node enters all L groups at one update
   barrier or none, leaves them at one, and a node lost in one group is lost in all
   (docs/fault-tolerance.md, "The node is admitted and leaves whole"). A membership call (join,
   update) runs on a thread while the local ranks poll each other, so that a rank whose group
   waits for its update meanwhile makes one, and a failure, or no admission within
   ``admit_timeout`` seconds, is raised on every local rank (MembershipError): a node that joins
   after the job ended stops instead of waiting for ever.
2. Every decision a node takes is taken by all its local ranks together: each wccl call's outcome
   is agreed over the local group (if one group lost a peer, the whole node updates), so the
   node's ranks never part ways.
3. ``roster(info)`` all-gathers one row per node (node id plus the caller's ``info``) in every
   group and compares the L results over the local group; a difference, or a lost peer, makes
   every node update again.

A coordinator that restarts does not stop a node: a membership call (join, update, leave, the
re-forming inside a state sync) that finds it unreachable is made again, for up to
``coordinator_grace`` seconds (the communicator reconnects by itself; a restarted coordinator
learns the job from its members).
"""

from __future__ import annotations

import hashlib
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

import torch
import torch.distributed as dist

from ._core import Communicator, EpochOrigin, OpStats, ReduceOp, Request, SyncMode, Wire
from ._lib import CoordinatorUnreachableError, PeerLostError, WcclError
from ._lib import TimeoutError as WcclTimeoutError
from ._torch_backend import Options, ProcessGroupWccl, register

__all__ = ["ElasticDeviceMesh", "GroupsState", "NodeRow", "MembershipError", "Options", "PendingAllreduce", "ProcessGroupWccl",
           "flat_hash"]

register()  # torch.distributed backend "wccl" (_torch_backend.py; docs/python.md)

# How a local rank's membership call stands (ElasticDeviceMesh._call_state).
WAITING = "waiting"    # the call is not over
ADMITTED = "admitted"  # it is over and the rank is a member of its group's epoch
DUE = "due"            # ... and that epoch waits for its update (Communicator.update_due), or its
                       # update timed out (it is still a member, waiting at the barrier)
TIMEOUT = "timeout"    # its join failed with TIMEOUT (it is in no group)
FAILED = "failed"      # its call failed with another error
OUT = "out"            # it has no call and is in no group


class MembershipError(RuntimeError):
    """A local rank's membership call failed in a way the node cannot recover from (a refused
    certificate, an unreachable coordinator past its timeout): raised on every local rank alike."""


@dataclass(frozen=True)
class NodeRow:
    """One node as a roster reports it: its id, local size and the ``info`` it passed."""

    node_id: int
    local_size: int
    info: Tuple[int, ...]


@dataclass(frozen=True)
class GroupsState:
    """How a node's groups stand (ElasticDeviceMesh.groups), agreed over its local ranks."""

    pending: int          # the fewest joiners any group has waiting (a joining node is waited for in every
                          # group before it is admitted: the mesh admits whole nodes)
    origin: EpochOrigin   # how the coordinator formed their epochs, the furthest from CONTINUES of the
                          # groups' (joiners alone after every member of the job was lost, or left)
    epoch: int            # the newest epoch number of the groups (all the same for nodes in the same epochs)
    size: int             # the fewest nodes any group's epoch holds


def flat_hash(tensors: Sequence[torch.Tensor]) -> str:
    """SHA-256 of the tensors' bytes, in order (hex)."""
    h = hashlib.sha256()
    for t in tensors:
        h.update(t.detach().contiguous().cpu().view(torch.uint8).numpy().tobytes())
    return h.hexdigest()


class _Call:
    """A blocking wccl call on a thread of its own (ctypes releases the GIL while it blocks)."""

    def __init__(self, fn: Callable[[], Any]) -> None:
        self.result: Any = None
        self.error: Optional[BaseException] = None
        self._thread = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[[], Any]) -> None:
        try:
            self.result = fn()
        except BaseException as e:  # reported to the caller through .error
            self.error = e

    def wait(self, timeout: float) -> bool:
        self._thread.join(timeout)
        return not self._thread.is_alive()


class PendingAllreduce:
    """An all-reduce of ElasticDeviceMesh.allreduce_start in flight over this local rank's group."""

    def __init__(self, mesh: "ElasticDeviceMesh", tensor: torch.Tensor, out: torch.Tensor, op: ReduceOp,
                 wire: Wire, topk_keep: int = 0, max_link_rate: int = 0) -> None:
        self._mesh = mesh
        self._request: Optional[Request] = None
        self._error: Optional[WcclError] = None
        try:
            self._request = mesh._member().allreduce(tensor, op, out=out, wire=wire, topk_keep=topk_keep,
                                                     max_link_rate=max_link_rate, async_op=True)
        except (PeerLostError, WcclTimeoutError) as e:  # the epoch was revoked before it started
            self._error = e

    def done(self) -> bool:
        """True once this rank's outcome is known (wait() still agrees it over the node)."""
        return self._request is None or self._request.done()

    def wait(self) -> Optional[OpStats]:
        """The stats when every group of the node committed, else None (see allreduce())."""
        stats = None
        if self._request is not None:
            try:
                stats = self._request.wait()
            except (PeerLostError, WcclTimeoutError) as e:
                self._error = e
            self._request = None
        if self._error is not None:
            self._mesh.uncommitted_bytes_sent += self._error.stats.bytes_sent if self._error.stats is not None else 0
            self._error = None
        if self._mesh.agree(stats is not None):
            return stats
        if stats is not None:  # committed here, but another group of the node did not: it runs again
            self._mesh.uncommitted_bytes_sent += stats.bytes_sent
        return None


class ElasticDeviceMesh:
    """This local rank's place in a job: the node's local group and one wccl communicator.

    ``torch.distributed`` must already be initialised over the node's local ranks (torchrun does
    it). ``config`` holds wccl configuration keys (coordinator, tls_cert, tls_key, tls_ca, ...);
    ``group`` is set to ``group_prefix + str(local rank)``. Construction joins: it returns once
    every local rank of the node is admitted (see the module's text). Every method is collective
    over the node's local ranks and must be called by all of them in the same order."""

    def __init__(self, *, group_prefix: str = "lr", poll: float = 0.05, coordinator_grace: float = 60.0,
                 admit_timeout: float = 3600.0, **config: Any) -> None:
        if not dist.is_initialized():
            raise RuntimeError("wccl.torch: torch.distributed must be initialised over the node's local ranks")
        self.local_rank = dist.get_rank()
        self.local_size = dist.get_world_size()
        # A group of its own for the mesh's agreement, apart from the one FSDP uses.
        self.local_group = dist.new_group(backend="gloo")
        self.poll = float(poll)
        self.coordinator_grace = float(coordinator_grace)
        self.admit_timeout = float(admit_timeout)
        ident = torch.tensor([int.from_bytes(os.urandom(7), "little")], dtype=torch.int64)
        dist.broadcast(ident, src=0, group=self.local_group)
        self.node_id = int(ident.item())
        config = dict(config)
        config["group"] = f"{group_prefix}{self.local_rank}"
        if "name" in config:
            config["name"] = f"{config['name']}.{self.local_rank}"
        # The coordinator admits, lets go and loses the node's communicators together, in all its
        # groups at once, so its groups never disagree about it.
        config["node"] = f"{self.node_id:014x}"
        config["node_groups"] = str(self.local_size)
        self._config = config
        # Payload bytes this local rank sent in all-reduce attempts that did not commit (a lost peer,
        # a straggler): they cost the link too. The caller reads it and sets it back to 0.
        self.uncommitted_bytes_sent = 0
        self.comm: Optional[Communicator] = None
        self._membership(self._call(self._join))
        # How the epochs that admitted the node were formed (the group's first, or the first after its
        # nodes all left, makes the node one of those that begin the job), and how many nodes they held.
        joined = self.groups()
        self.joined_origin, self.joined_size = joined.origin, joined.size

    # --- agreement inside the node ------------------------------------------------------------------

    def gather(self, values: Sequence[int]) -> List[List[int]]:
        """Every local rank's ``values`` (same length everywhere), by local rank."""
        mine = torch.tensor(list(values), dtype=torch.int64)
        out = [torch.empty_like(mine) for _ in range(self.local_size)]
        dist.all_gather(out, mine, group=self.local_group)
        return [t.tolist() for t in out]

    def agree(self, ok: bool) -> bool:
        """True on every local rank iff ``ok`` is true on all of them."""
        flag = torch.tensor([1 if ok else 0], dtype=torch.int32)
        dist.all_reduce(flag, op=dist.ReduceOp.MIN, group=self.local_group)
        return bool(flag.item())

    def node_sum(self, value: float) -> float:
        """The sum of ``value`` over the node's local ranks."""
        t = torch.tensor([float(value)], dtype=torch.float64)
        dist.all_reduce(t, group=self.local_group)
        return float(t.item())

    # --- membership ---------------------------------------------------------------------------------

    def _join(self) -> Communicator:
        return Communicator(**self._config)

    def _through_restarts(self, fn: Callable[[], Any]) -> Any:
        """fn(), made again while it finds the coordinator unreachable, for up to coordinator_grace
        seconds (then its error is raised)."""
        deadline = time.monotonic() + self.coordinator_grace
        while True:
            try:
                return fn()
            except CoordinatorUnreachableError:
                if time.monotonic() >= deadline:
                    raise
            time.sleep(min(0.5, max(0.0, deadline - time.monotonic())))  # the communicator reconnects meanwhile

    def _call(self, fn: Callable[[], Any]) -> _Call:
        return _Call(lambda: self._through_restarts(fn))

    def _membership(self, call: _Call) -> None:
        """Waits until every local rank's membership call (a join or an update) admitted it: the
        coordinator admits the node whole, so the calls end together. Meanwhile a rank whose group
        waits for its update (its epoch was revoked, a barrier began, or its own update timed out
        at the barrier) makes one, so no barrier waits on an idle rank, and a join that timed out
        is made again. A call failing otherwise, or no admission within ``admit_timeout`` seconds,
        is raised on every local rank."""
        started = time.monotonic()
        while True:
            done = call.wait(self.poll)  # read once per poll: the call may end at any moment
            if done and call.error is None and isinstance(call.result, Communicator):
                self.comm, call.result = call.result, None  # a join that admitted this rank
            state = self._call_state(call, done)
            if state == DUE:
                call, state = self._call(self._member().update), WAITING
            elif state == TIMEOUT:  # its node waits for it: it registers again
                call, state = self._call(self._join), WAITING
            expired = time.monotonic() - started > self.admit_timeout
            rows = self.gather([int(state == ADMITTED), int(state == FAILED), int(expired)])
            if any(r[1] for r in rows):
                why = f"local rank {self.local_rank}: {call.error}" if state == FAILED else "another local rank's call failed"
                raise MembershipError(f"wccl.torch: the node cannot join its groups ({why})") from call.error
            if all(r[0] for r in rows):
                return
            if any(r[2] for r in rows):
                raise MembershipError(f"wccl.torch: the node was not admitted to its groups within {self.admit_timeout:g} s "
                                      "(admit_timeout): no node of the job admitted it (has the job ended?)")

    def _call_state(self, call: Optional[_Call], done: bool) -> str:
        """How a membership call stands."""
        if call is None:
            return OUT
        if not done:
            return WAITING
        if call.error is not None and not isinstance(call.error, WcclTimeoutError):
            return FAILED
        if self.comm is None:  # a join that timed out
            return TIMEOUT if call.error is not None else OUT
        # A member: an update that timed out still waits at the barrier, like one its group waits for.
        return DUE if call.error is not None or self.comm.update_due else ADMITTED

    def update(self) -> None:
        """Every local rank updates its group (``wccl_comm_update``): a new epoch with the
        survivors and the admitted joiners; returns once the whole node is in it."""
        self._membership(self._call(self._join if self.comm is None else self.comm.update))

    def groups(self) -> "GroupsState":
        """How this node's groups stand, the same on every local rank (one gather over the node)."""
        c = self.comm
        rows = self.gather([c.pending, int(c.epoch_origin), c.epoch, c.size] if c is not None else [0, 0, 0, 0])
        return GroupsState(pending=min(r[0] for r in rows), origin=EpochOrigin(max(r[1] for r in rows)),
                           epoch=max(r[2] for r in rows), size=min(r[3] for r in rows))

    def roster(self, info: Sequence[int]) -> Optional[List[NodeRow]]:
        """All-gathers ``(node id, local size, *info)`` in this rank's group and compares the
        groups' results over the node: the nodes (sorted by id) when every group holds the same
        nodes with the same rows, None when they differ or a group lost a peer or timed out (call
        update()).
        ``info`` must be the same on every local rank; its length the same on every node."""
        row = torch.tensor([self.node_id, self.local_size, *[int(v) for v in info]], dtype=torch.int64)
        table = torch.empty(row.numel() * self._member().size, dtype=torch.int64)
        ok = True
        try:
            self._member().allgather(row, table)
        except (PeerLostError, WcclTimeoutError):
            ok = False
        if not self.agree(ok):
            return None
        rows = sorted(tuple(r) for r in table.view(-1, row.numel()).tolist())
        objects: List[Any] = [None] * self.local_size
        dist.all_gather_object(objects, rows, group=self.local_group)
        if any(o != rows for o in objects):
            return None
        return [NodeRow(r[0], r[1], tuple(r[2:])) for r in rows]

    def _member(self) -> Communicator:
        if self.comm is None:
            raise MembershipError("wccl: this local rank is not a member (it left, or its join failed)")
        return self.comm

    def leave(self) -> None:
        """Leaves every group gracefully (the others' next update goes on without this node)."""
        if self.comm is not None:
            try:
                self._through_restarts(self.comm.leave)
            finally:
                self.comm.close()
                self.comm = None

    def close(self) -> None:
        if self.comm is not None:
            self.comm.close()
            self.comm = None

    # --- collectives over the node's groups -------------------------------------------------------

    def allreduce(self, tensor: torch.Tensor, out: torch.Tensor, op: ReduceOp = ReduceOp.SUM,
                  wire: Wire = Wire.INT8, topk_keep: int = 0) -> Optional[OpStats]:
        """``out`` = op over this local rank's group, out of place (``tensor`` is left as it is);
        ``topk_keep`` as Communicator.allreduce's (the TOPK wire's elements kept per block).
        Returns the stats when every group of the node committed, None when any group lost a peer
        or gave up waiting for one (TIMEOUT: a straggler; the epoch is revoked for the others, so
        every node updates and retries together): then call update() and retry with the same
        ``tensor`` (the outputs of the groups that did commit are overwritten by the retry)."""
        return self.allreduce_start(tensor, out, op, wire, topk_keep).wait()

    def allreduce_start(self, tensor: torch.Tensor, out: torch.Tensor, op: ReduceOp = ReduceOp.SUM,
                        wire: Wire = Wire.INT8, topk_keep: int = 0, max_link_rate: int = 0) -> "PendingAllreduce":
        """allreduce() without blocking: the caller goes on (inner steps of a streaming DiLoCo)
        and later calls ``wait()`` on the result, which returns what allreduce() returns. Neither
        ``tensor`` nor ``out`` may be touched until then. Every local rank starts and waits for its
        all-reduces in the same order. ``max_link_rate``: bytes per second each link of this
        rank's group may send it at (0: unpaced; the option of that name, docs/python.md), so a
        transfer that the compute hides anyway leaves the link to other traffic."""
        return PendingAllreduce(self, tensor, out, op, wire, topk_keep, max_link_rate)

    def sync_state(self, tensors: Dict[str, torch.Tensor], revision: int, mode: SyncMode) -> Optional[int]:
        """``wccl_state_sync`` in every group: the elected revision when every group succeeded, None
        when any group lost a peer it could not replace, or met the coordinator restarting (update()
        and call again)."""
        revision_out = None
        try:
            revision_out = self._member().sync_state(tensors, revision, mode).revision
        except (PeerLostError, WcclTimeoutError, CoordinatorUnreachableError):  # or met a restarting coordinator
            pass
        return revision_out if self.agree(revision_out is not None) else None
