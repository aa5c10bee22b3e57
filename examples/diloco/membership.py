"""The trainer's node-level rules, without I/O (docs/trainer.md, "Membership").

``settle`` is a generator: it yields the mesh call a node makes next (``Update``, ``Roster``,
``Sync``), is sent that call's result, and returns an ``Outcome`` (or raises ``Refused``).
``diloco`` is a node's whole DiLoCo loop in the same form: it yields ``Train``, ``Reduce``,
``Commit`` and ``Record`` besides settle's calls. The trainer drives them with its model and its
ElasticDeviceMesh (train.py, ``Trainer.answer``); the tests drive ``settle`` with scripted results
(tests/trainer/test_membership.py) and many nodes' ``diloco`` loops in a seeded simulation of a job
with faults (tests/trainer/node_sim.py). Every rule of when a node trains, who syncs whose state,
what the outer step divides by and when joiners are admitted lives here.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from typing import Any, Generator, List, Optional, Sequence, Union

BOUNDARY, REDUCE = 0, 1  # where a node is in its outer step: before the inner steps, or at the all-reduce
# How the epoch was formed (wccl_epoch_origin_t): from the members of the one before, or by joiners
# alone: the group's first, or after every member of the group was lost, or left.
CONTINUES, FIRST, AFTER_LOSS, AFTER_LEAVE = 0, 1, 2, 3
SEND_ONLY, RECEIVE_ONLY, POPULAR = "send_only", "receive_only", "popular"  # the state sync's roles


@dataclass
class Position:
    """Where this node is, as it tells the others in every roster."""

    step: int = 0            # outer steps committed
    phase: int = BOUNDARY
    has_delta: bool = False  # it ran this step's inner steps (its pseudo-gradient counts)
    fresh: bool = True       # it has not yet held state agreed with the others
    known_step: int = -1     # the newest outer step it knows a node of the job held (-1: none); 0 at
    #                          least once its epoch was formed after the job's nodes were all lost
    in_job: bool = False     # it trained with the job (its loop began) in this run
    joined_origin: int = CONTINUES  # how the epoch its join entered was formed (mesh.joined_origin)
    founding: int = 0        # founders: the nodes of that epoch if it was the group's first (or the first
    #                          after a job's nodes left); 0 for a node admitted later
    missed_start: bool = False  # a founder whose state sync that began the job failed: others may have begun it
    epoch: int = 0           # the epoch of its last roster (mesh.groups().epoch)
    loop_epoch: int = -1     # the epoch in which its loop began

    @property
    def founder(self) -> bool:
        return self.founding > 0


@dataclass(frozen=True)
class Row:
    """One node of a roster: what ElasticDeviceMesh.roster returns, decoded."""

    node_id: int
    step: int
    phase: int
    has_delta: bool
    fresh: bool
    fingerprint: int   # configuration_fingerprint() of the node
    known_step: int    # Position.known_step
    founding: int      # Position.founding
    missed_start: bool  # Position.missed_start
    pending: int       # joiners its groups have waiting (mesh.groups().pending, appended by the driver)
    origin: int        # how its epoch was formed (mesh.groups().origin, appended by the driver)
    epoch: int         # its epoch (mesh.groups().epoch, appended by the driver)

    @staticmethod
    def info(pos: Position, fingerprint: int) -> List[int]:
        """What a node passes to ElasticDeviceMesh.roster, before the driver appends pending, origin
        and epoch."""
        return [pos.step, pos.phase, int(pos.has_delta), int(pos.fresh), fingerprint, pos.known_step, pos.founding,
                int(pos.missed_start)]

    @staticmethod
    def decode(node_id: int, info: Sequence[int]) -> "Row":
        step, phase, has_delta, fresh, fingerprint, known_step, founding, missed_start, pending, origin, epoch = info
        return Row(node_id, step, phase, bool(has_delta), bool(fresh), fingerprint, known_step, founding,
                   bool(missed_start), pending, origin, epoch)


@dataclass(frozen=True)
class Update:
    """Call mesh.update() (a new epoch: survivors and admitted joiners)."""


@dataclass(frozen=True)
class Roster:
    """Call mesh.roster(info + [pending, origin, epoch] of mesh.groups()); send back the
    rows (list of Row) or None."""

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


@dataclass(frozen=True)
class Wait:
    """No node of the epoch holds the job's state, which exists (its nodes were all lost: one may
    come back, or be started with --resume): wait a while before the update that admits it. Send
    back True once the node has waited longer than it may (the mesh's admit_timeout): it stops."""


@dataclass(frozen=True)
class Joined:
    """The node is in the job at outer step ``step`` (seed its data stream from it)."""

    step: int


@dataclass(frozen=True)
class Train:
    """Run the inner steps of sync ``step`` and compute the pseudo-gradient; send back whether it is
    finite on every local rank. A node whose pseudo-gradient is not finite is then told ``Discard``."""

    step: int


@dataclass(frozen=True)
class Discard:
    """The pseudo-gradient is not finite: reset the shard to the outer parameters (and the inner
    optimizer's state); the node sends zeros in this sync's all-reduce and is not counted."""


@dataclass(frozen=True)
class Reduce:
    """All-reduce (SUM) the pseudo-gradient of sync ``step``, or zeros without ``send``; send back
    ``(committed, waiting)``: whether every group of the node committed, and the joiners waiting if
    the call learnt it (an overlapped last sync of an outer step carries the count), else None.
    A retry after ``committed`` false sends the same pseudo-gradient."""

    step: int
    send: bool


@dataclass(frozen=True)
class Commit:
    """The all-reduce of sync ``sync`` committed (pos.step already counts it when ``divisor`` > 0):
    divide the sum by ``divisor`` and take the outer step of the sync's fragment (then checkpoint if
    due); with 0 (nobody trained it) only load the outer parameters into the shard. Send back nothing."""

    sync: int
    divisor: int


@dataclass(frozen=True)
class Record:
    """Log the committed outer step: ``contributors`` trained it, ``nodes`` were in its epoch."""

    step: int
    contributors: int
    nodes: int


class Refused(Exception):
    """This node cannot take part in the job (its configuration differs from the job's, or the
    synchronous baseline admits no newcomer): it leaves, and the others go on without it."""


class Stopped(Exception):
    """This node stops: the job ended while it was away (``job_ended``), or no node holding the
    job's state came back in time. Nobody else is affected."""

    def __init__(self, message: str, job_ended: bool) -> None:
        super().__init__(message)
        self.job_ended = job_ended


Call = Union[Update, Roster, Sync, Wait, Joined, Train, Discard, Reduce, Commit, Record]


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
        origin = max(r.origin for r in rows)
        pos.epoch = next((r.epoch for r in rows if r.node_id == node_id), max(r.epoch for r in rows))
        if origin == AFTER_LEAVE and pos.epoch != pos.loop_epoch and (pos.in_job or pos.joined_origin != AFTER_LEAVE):
            # Admitted after the job's nodes left, and not as a node of a new job (those joined this
            # very epoch and begin their loop in it): a node of the job that ended.
            raise Stopped(f"the job's other nodes left (it ended) while this node was away; its state at step "
                          f"{pos.step} is not the job's", job_ended=True)
        top = max(r.step for r in rows)
        current = [r for r in rows if r.step == top and not r.fresh]
        # The newest state any node of the epoch knows the job held: it must be here to go on.
        pos.known_step = max([pos.known_step, *(r.known_step for r in rows), *(r.step for r in rows if not r.fresh),
                              0 if origin == AFTER_LOSS else -1])
        # Who may begin the job from its founders' state: every founder, if all are here and none
        # holds state (then nobody began it: every state descends from theirs); else, if nobody here
        # knows of a state, the founders here that did not miss its beginning (their first state
        # sync failed: the others may have begun it without them).
        founders = [r for r in rows if r.founding]
        if founders and len(founders) >= max(r.founding for r in founders):
            beginners = founders
        else:
            beginners = [r for r in founders if not r.missed_start] if pos.known_step < 0 else []
        if (top < pos.known_step) if current else not beginners:
            # The job's newest state is elsewhere: its nodes were lost (frozen, cut off, dead) after
            # a node here saw them, or no node here may begin the job. None of the states here is
            # the job's; a node that holds it (one that was frozen, or started with --resume) may come.
            if (yield Wait()):
                raise Stopped(f"no node holding the job's state of step {max(pos.known_step, 0)} came back (every "
                              "node that held it was lost): start one with --resume from its checkpoints, or a new "
                              "job with a new coordinator", job_ended=False)
            need_update = True
            continue
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
            else:  # every node is new and the job begins: from its founders' (one seed's) state
                mode = POPULAR if any(r.node_id == node_id for r in beginners) else RECEIVE_ONLY
            revision = yield Sync(mode, pos.step, receive=not me_current)
            if revision is None:
                pos.missed_start = pos.missed_start or (pos.founder and mode == POPULAR)
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


def diloco(pos: Position, node_id: int, *, syncs: int, fragments: int, fingerprint: int,
           sync_mode: bool = False) -> Generator[Call, object, None]:
    """A node's DiLoCo loop from its admission to its last sync: ``syncs`` syncs of one fragment of
    ``fragments`` each (pos.step counts them; an outer step is ``fragments`` syncs). Every node of an
    epoch makes the same collective calls in the same order: a sync's all-reduce, retried after an
    update (same pseudo-gradient) until it commits; a roster at an outer step's boundary only when a
    joiner may wait (the all-reduce's count says so, or it did not carry one)."""
    def settled(need_update: bool) -> Generator[Call, object, Outcome]:
        return settle(pos, node_id, fingerprint=fingerprint, sync_mode=sync_mode, need_update=need_update)

    outcome = yield from settled(False)
    pos.in_job, pos.loop_epoch = True, pos.epoch
    yield Joined(pos.step)
    while True:
        if pos.phase == BOUNDARY:
            if pos.step >= syncs:
                return
            finite = yield Train(pos.step)
            pos.has_delta, pos.phase = True, REDUCE
            if not finite:
                # A diverged node sits the sync out: its update, where the others are in the
                # all-reduce, revokes the epoch, and the roster that follows tells every node.
                pos.has_delta = False
                yield Discard()
                outcome = yield from settled(True)
        committed, waiting = False, None
        while pos.phase == REDUCE:
            committed, waiting = yield Reduce(pos.step, send=pos.has_delta)  # type: ignore[misc]
            if committed:
                break
            outcome = yield from settled(True)  # a node was lost: new epoch, same pseudo-gradient
        if not committed:
            continue  # every node that trained this sync was lost (now at its boundary): train again
        contributors, nodes, sync = outcome.contributors, outcome.nodes, pos.step
        if contributors > 0:
            pos.step += 1
            pos.known_step = max(pos.known_step, pos.step)
        yield Commit(sync, contributors)
        pos.phase, pos.has_delta = BOUNDARY, False
        if pos.step % fragments == 0 and waiting != 0:
            outcome = yield from settled(False)  # an outer step's boundary: admit waiting nodes
        else:
            # Inside an outer step no roster (a round trip per sync on a WAN), nor at its end when the
            # all-reduce's count says no joiner waits: a lost node shows as a failed all-reduce, and
            # every node of the epoch trains the next sync.
            outcome = Outcome(nodes=outcome.nodes, contributors=outcome.nodes)
        if contributors > 0:
            yield Record(pos.step, contributors, nodes)


def run(machine: Generator[Call, object, Any], answer) -> Any:
    """Drives a settle or diloco generator: ``answer(call)`` makes each call and returns its result."""
    result: Optional[object] = None
    try:
        while True:
            result = answer(machine.send(result))
    except StopIteration as done:
        return done.value
