"""The trainer's node-level membership rules, without I/O (docs/trainer.md, "Membership").

``settle`` is a generator: it yields the mesh call a node makes next (``Update``, ``Roster``,
``Sync``), is sent that call's result, and returns an ``Outcome`` (or raises ``Refused``). The
trainer drives it with its ElasticDeviceMesh (train.py, ``Trainer.settle``); the tests drive it with
scripted results (tests/trainer/test_membership.py). Every rule of who
trains, who syncs whose state and what the outer step divides by lives here.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Generator, List, Optional, Sequence, Union

BOUNDARY, REDUCE = 0, 1  # where a node is in its outer step: before the inner steps, or at the all-reduce
SEND_ONLY, RECEIVE_ONLY, POPULAR = "send_only", "receive_only", "popular"  # the state sync's roles


@dataclass
class Position:
    """Where this node is, as it tells the others in every roster."""

    step: int = 0            # outer steps committed
    phase: int = BOUNDARY
    has_delta: bool = False  # it ran this step's inner steps (its pseudo-gradient counts)
    fresh: bool = True       # it has not yet held state agreed with the others


@dataclass(frozen=True)
class Row:
    """One node of a roster: what ElasticDeviceMesh.roster returns, decoded."""

    node_id: int
    step: int
    phase: int
    has_delta: bool
    fresh: bool
    fingerprint: int   # configuration_fingerprint() of the node
    pending: int       # joiners its groups have waiting (mesh.pending(), appended by the driver)

    @staticmethod
    def info(pos: Position, fingerprint: int) -> List[int]:
        """What a node passes to ElasticDeviceMesh.roster, before the driver appends pending."""
        return [pos.step, pos.phase, int(pos.has_delta), int(pos.fresh), fingerprint]

    @staticmethod
    def decode(node_id: int, info: Sequence[int]) -> "Row":
        step, phase, has_delta, fresh, fingerprint, pending = info
        return Row(node_id, step, phase, bool(has_delta), bool(fresh), fingerprint, pending)


@dataclass(frozen=True)
class Update:
    """Call mesh.update() (a new epoch: survivors and admitted joiners)."""


@dataclass(frozen=True)
class Roster:
    """Call mesh.roster(info + [mesh.pending()]); send back the rows (list of Row) or None."""

    info: List[int]


@dataclass(frozen=True)
class Sync:
    """Call mesh.sync_state(state, revision, mode); send back the elected revision or None. With
    ``receive``, the node takes the state it receives as its parameters (load its shard)."""

    mode: str
    revision: int
    receive: bool


@dataclass(frozen=True)
class Outcome:
    """The nodes in the epoch, and how many of them count in this step's average (nodes that trained
    it). The node's phase is in its Position."""

    nodes: int
    contributors: int


class Refused(Exception):
    """This node cannot take part in the job (its configuration differs from the job's, or the
    synchronous baseline admits no newcomer): it leaves, and the others go on without it."""


Call = Union[Update, Roster, Sync]


def hash63(text: str) -> int:
    """A non-negative 63-bit hash of text (SHA-256), the same in every process."""
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "little") >> 1


def configuration_fingerprint(**settings: object) -> int:
    """A 63-bit hash of what every node of a job must agree on (local size, model shape, H, learning
    rates, wire, mode), carried in every roster row."""
    return hash63(";".join(f"{k}={settings[k]!r}" for k in sorted(settings)))


def settle(pos: Position, node_id: int, *, fingerprint: int, sync_mode: bool,
           need_update: bool) -> Generator[Call, object, Outcome]:
    """Until every node agrees: update if needed, take the roster, admit whole joining nodes at a
    step boundary, and bring stale or fresh nodes to the others' state through state sync. Updates
    ``pos`` in place."""
    while True:
        if need_update:
            yield Update()
            need_update = False
        result = yield Roster(Row.info(pos, fingerprint))
        if result is None:
            need_update = True
            continue
        rows: List[Row] = sorted(result, key=lambda r: r.node_id)  # type: ignore[arg-type]
        top = max(r.step for r in rows)
        current = [r for r in rows if r.step == top and not r.fresh]
        # The job's configuration is the one of the nodes that hold its state (else the most common;
        # ties to the lowest node id): a misfit leaves, the others update without it.
        job = Counter(r.fingerprint for r in (current or rows)).most_common(1)[0][0]
        if fingerprint != job:
            raise Refused("this node's configuration (local ranks, model shape, inner steps, learning rates, "
                          "wire or mode) differs from the job's: it leaves, the job goes on without it")
        if any(r.fingerprint != job for r in rows):
            need_update = True
            continue
        me_current = any(r.node_id == node_id for r in current)
        behind = [r for r in rows if r.step != top or r.fresh]
        if sync_mode and current and behind:
            if not me_current:
                raise Refused("the synchronous baseline admits no node mid-run (use --mode diloco): this node "
                              "leaves, the job goes on without it")
            need_update = True  # the newcomer leaves
            continue
        # The step is reduced when a node that holds the state trained it. A node at its boundary
        # (declared lost there, then admitted again by the others' retry) joins that all-reduce with
        # no pseudo-gradient; a node at REDUCE without one (brought up to date) has nothing to send.
        phase = REDUCE if any(r.phase == REDUCE and r.has_delta for r in current) else BOUNDARY
        if phase == BOUNDARY and any(r.pending > 0 for r in rows):
            need_update = True  # a whole node waits in every group: admit it before the inner steps
            continue
        if behind:
            if current:
                mode = SEND_ONLY if me_current else RECEIVE_ONLY
            else:  # every node is fresh: the most common initial state wins
                mode = POPULAR if pos.step == top else RECEIVE_ONLY
            revision = yield Sync(mode, pos.step, receive=not me_current)
            if revision is None:
                need_update = True
                continue
            if not me_current:
                pos.has_delta = False
            pos.step, pos.fresh = int(revision), False  # type: ignore[call-overload]
            continue  # the roster again: the sync may have re-formed the epoch without a lost node
        if pos.phase != phase:
            pos.phase, pos.has_delta = phase, False
        if phase == BOUNDARY:
            return Outcome(nodes=len(rows), contributors=len(rows))
        return Outcome(nodes=len(rows), contributors=sum(1 for r in current if r.phase == REDUCE and r.has_delta))


def run(machine: Generator[Call, object, Outcome], answer) -> Outcome:
    """Drives a settle generator: ``answer(call)`` makes each call and returns its result."""
    result: Optional[object] = None
    try:
        while True:
            result = answer(machine.send(result))
    except StopIteration as done:
        return done.value
