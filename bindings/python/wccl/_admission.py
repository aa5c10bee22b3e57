"""How a node's local ranks come into their groups together: the rule of wccl.torch's
ElasticDeviceMesh, without I/O (no torch, no ctypes), so that a seeded simulation of nodes of
several groups runs it as the mesh does (tests/trainer/mesh_sim.py; docs/trainer.md, "Membership").

Each local rank of a node makes one membership call in its own group (a join, or an update of a
member) on a thread. Every poll, each rank takes the step the rule gives it for how its call
stands (``Admission.step``), tells the others how it stands (``Admission.report``, gathered over
the node), and every rank takes the same decision from the gathered reports (``Admission.decide``).

A rank whose call is over while its node still waits for others is idle, and its group may wait
for it: the others' next update barrier, or their collectives, which it does not join. So:

- a rank whose group waits for its update (``Communicator.update_due``: the epoch was revoked, or a
  barrier began) makes one at once (step "update"): no barrier waits on an idle rank; so does a
  rank whose update timed out (it is still a member, waiting at the barrier) - while the node
  retreats, such a rank leaves instead;
- when some ranks are in and others still wait ``admit_skew`` later, a node that is in already
  (its ranks update) nudges its groups (NUDGE: its admitted ranks update again, so the collectives
  that wait on them fail and every node comes to the barriers), and a joining node retreats
  (RETREAT): its admitted ranks leave their groups, and so does each rank that its pending call
  admits meanwhile; once every rank is out, they all join again at once (REJOIN), so that one
  update admits the whole node. A join that timed out retreats too. Leaving takes a joining node
  out of the job's way while its slow rank comes (a nudge would hold the job until then); a node
  that is in already never leaves (leaving the groups it is the last member of would form an
  epoch of newcomers alone, which the trainer takes for the job's end);
- every rank admitted: the node is in (ADMITTED); a call failed with an error other than TIMEOUT:
  it cannot join (FATAL); ``admit_timeout`` passed: it stops (EXPIRED); else it waits (WAIT).

Found by the simulation, against the rule the mesh had before (retreat for every node, each rank
joining again as soon as it had left, the leave blocking the node's polls): the barrier of a
retreating rank's leave admitted its node's other rank, so the node was partly admitted again, the
other way round, for ever; a node that was in already left its groups, forming an epoch of
newcomers alone; idle ranks, and ranks held behind a blocking leave, held their groups'
collectives until the operation timeout (10 minutes by default). docs/trainer.md, "The mesh's
groups, simulated".
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import List, Optional, Sequence

WAITING = "waiting"    # the rank's call is not over
ADMITTED = "admitted"  # its call is over and it is a member of its group's epoch
DUE = "due"            # ... and that epoch waits for its update (Communicator.update_due), or its
                       # update timed out (it is still a member, waiting at the barrier)
TIMEOUT = "timeout"    # its join failed with TIMEOUT (it is in no group)
FAILED = "failed"      # its call failed with another error
OUT = "out"            # it has no call and is in no group (it left, retreating)


class Verdict(enum.Enum):
    WAIT = "wait"
    ADMITTED = "admitted"
    NUDGE = "nudge"        # at the next poll, every admitted rank makes an update
    RETREAT = "retreat"    # from the next poll, every admitted rank leaves its group
    REJOIN = "rejoin"      # every rank is out: each joins again
    FATAL = "fatal"
    EXPIRED = "expired"


@dataclass(frozen=True)
class Report:
    """What one local rank tells the others at a poll."""

    admitted: bool = False  # its call admitted it (ADMITTED or DUE)
    waiting: bool = False   # its call is not over
    failed: bool = False    # its call failed (a join that timed out, or a FATAL error)
    fatal: bool = False     # ... with an error other than TIMEOUT
    late: bool = False      # a rank was admitted admit_skew ago while others still wait
    expired: bool = False   # admit_timeout has passed since the call began

    def as_ints(self) -> List[int]:
        return [int(v) for v in (self.admitted, self.waiting, self.failed, self.fatal, self.late, self.expired)]

    @staticmethod
    def from_ints(values: Sequence[int]) -> "Report":
        return Report(*(bool(v) for v in values))


class Admission:
    """One local rank's side of a node's membership call. ``joining``: the node is not in its
    groups (a join); else its ranks are members that update (even one that the coordinator
    declared lost: its ranks' updates register it again, together)."""

    def __init__(self, now: float, admit_skew: float, admit_timeout: float, joining: bool) -> None:
        self.started = now
        self.admit_skew = admit_skew
        self.admit_timeout = admit_timeout
        self.joining = joining
        self.retreating = False
        self.nudging = False
        self.first_admitted: Optional[float] = None  # when this rank first saw a rank of its node admitted

    def step(self, call: str) -> Optional[str]:
        """What this rank does first, given how its call stands: "update" (make an update), "leave"
        (leave its group and close), or None."""
        if self.retreating and call in (ADMITTED, DUE):
            return "leave"
        if call == DUE or (self.nudging and call == ADMITTED):
            return "update"
        return None

    def report(self, call: str, now: float) -> Report:
        """This rank's report, ``call`` saying how its call stands after its step."""
        self.nudging = False
        if self.retreating and call == TIMEOUT:
            call = OUT  # a join that timed out while the node retreats: this rank is out
        late = not self.retreating and self.first_admitted is not None and now - self.first_admitted > self.admit_skew
        return Report(admitted=call in (ADMITTED, DUE), waiting=call == WAITING, failed=call in (TIMEOUT, FAILED),
                      fatal=call == FAILED, late=late, expired=now - self.started > self.admit_timeout)

    def decide(self, reports: Sequence[Report], now: float) -> Verdict:
        """The node's decision from every rank's report (the same list on every rank)."""
        if any(r.fatal for r in reports):
            return Verdict.FATAL
        if not self.retreating and all(r.admitted for r in reports):
            return Verdict.ADMITTED
        if any(r.expired for r in reports):
            return Verdict.EXPIRED
        if self.retreating:
            if any(r.admitted or r.waiting for r in reports):
                return Verdict.WAIT  # until every rank is out
            self.retreating, self.first_admitted = False, None
            return Verdict.REJOIN
        if self.joining and any(r.failed or r.late for r in reports):
            self.retreating = True
            return Verdict.RETREAT
        if any(r.late for r in reports):
            self.nudging, self.first_admitted = True, None
            return Verdict.NUDGE
        if self.first_admitted is None and any(r.admitted for r in reports):
            self.first_admitted = now
        return Verdict.WAIT
