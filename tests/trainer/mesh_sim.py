"""A seeded simulation of the mesh's groups (docs/trainer.md, "The mesh's groups, simulated").

A node of the mesh has L local ranks, each with its own wccl communicator in its own group
(``lr0`` .. ``lr<L-1>``), and wccl admits each group's joiners at that group's own update barrier:
the groups of a joining node can take it in at different times. Here every node runs the mesh's own
admission rule (``wccl._admission``: its polls, the agreement over the node, updates of idle ranks
whose group waits for them, nudges, retreats) against a model of one coordinator serving L groups:
update barriers over each epoch's live members (a member that does not come holds the barrier up;
no straggler policy), joiners admitted at the barrier, or forming an epoch alone after the settle
time when the group has no member (origin AFTER_LEAVE or AFTER_LOSS), graceful leave at the
barrier, collectives that commit only when every member of the epoch calls them (a barrier begun,
or a lost member, fails them; one that waits past the operation timeout, 30 s here as 10 minutes in
wccl, fails and revokes the epoch), an update naming an older epoch answered at once, a node's
communicators lost together, ``update_due`` as the library reports it. Each rank is a process of
its own: its calls reach the coordinator 0-300 ms apart from its node's other ranks'. Each node
loops as the trainer does at its outer boundaries: roster in every group (rows carry the node's step
and its joiners waiting), an update when every group has a joiner waiting or a call failed, the
all-reduce of the step in every group, accepted only when every group committed it. Faults from the
seed: joiners whose local ranks register up to 20 s apart, SIGKILL of a node, freezes shorter than
the peer timeout at any point and longer ones outside membership calls, two faults close together.
Not modelled: the coordinator's restarts and what a step's all-reduce carries (node_sim.py does
both), a node frozen past the peer timeout inside a membership call.

Checked on every run: a node is admitted only when every local rank is a member of its group's
epoch; every group of a node commits a step's all-reduce with the same nodes, and every node that
commits a step commits it with the same nodes, once and in order; a node in the job never leaves
its groups while alive, and no epoch of newcomers alone forms while a node of the job is alive and
in it (the trainer takes one for the job's end, or its loss); no membership call fails or expires;
node1 (never killed nor lost) commits a step at least every 20 s: no wait lasts until an operation
times out; every node not killed finishes the job (or, come back after it ended, stops); no stall.

    python3 tests/trainer/mesh_sim.py --seeds 500           # seeds 1..500, a line per failure
    python3 tests/trainer/mesh_sim.py --seed 17 --verbose   # one run, every event
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, Iterator, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bindings" / "python" / "wccl"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import _admission as a  # noqa: E402  (the mesh's rule; the package itself needs libwccl)
import seeded  # noqa: E402

Violation = seeded.Violation  # what Sim.fail raises

POLL_MS = 50
ADMIT_SKEW_MS = 1000
ADMIT_TIMEOUT_MS = 120_000
OP_TIMEOUT_MS = 30_000     # a collective, an update or a leave gives up after this (wccl's default: 10 min)
JOIN_TIMEOUT_MS = 30_000
PEER_TIMEOUT_MS = 2000     # a frozen node is declared lost after this
KILL_DETECT_MS = 50
SETTLE_MS = 100
HELD_UP_MS = 20_000        # node1 commits at least this often: no wait lasts until an operation times out


@dataclass
class Call:
    """One local rank's wccl call in its group."""

    node: int
    group: int
    kind: str                      # join, update, leave, op
    key: Tuple[str, int] = ("", 0)  # an op's (name, step)
    epoch: int = 0                 # an update's: the epoch its rank is in
    payload: Tuple[int, ...] = ()
    done: bool = False
    error: Optional[str] = None    # timeout, fatal, lost
    result: Any = None


@dataclass
class Group:
    index: int
    epoch: int = 1
    origin: str = "first"
    members: List[int] = field(default_factory=list)
    joiners: Dict[int, Call] = field(default_factory=dict)   # node -> its join (or update) call, in arrival order
    arrivals: Dict[int, Call] = field(default_factory=dict)  # node -> its update or leave call at the barrier
    ops: Dict[int, Call] = field(default_factory=dict)       # node -> its call of the epoch's current operation
    revoked: bool = False
    last_gone: str = "left"
    last_join: int = 0


@dataclass
class Rank:
    call: Optional[Call] = None
    member: bool = False           # holds a communicator (its join or update admitted it)
    epoch: int = 1                 # the epoch it was last admitted to


@dataclass
class Node:
    ident: int
    ranks: List[Rank]
    founder: bool
    status: str = "running"        # running, leaving, done, stopped, dead
    gen: Optional[Iterator[Any]] = None
    step: int = 1
    frozen_until: int = 0
    lost: bool = False             # the coordinator declared it lost
    in_job: bool = False           # admitted and not gone
    committed: List[int] = field(default_factory=list)
    commit_times: List[int] = field(default_factory=list)
    token: int = 0                 # the wake-up the node waits for
    awaiting: List[Call] = field(default_factory=list)
    registered: Optional[int] = None  # when its last rank's join reached the coordinator (joiners)
    why: str = ""


class Sleep:
    def __init__(self, ms: int) -> None:
        self.ms = ms


class Await:
    """Resume once every call is done, or after ``limit`` ms."""

    def __init__(self, calls: List[Call], limit: Optional[int] = None) -> None:
        self.calls, self.limit = calls, limit


class Sim(seeded.EventLoop):
    def __init__(self, seed: int, verbose: bool = False) -> None:
        super().__init__(seed, verbose)
        r = self.rng
        self.L = r.choice([2, 2, 3])
        self.steps = r.randint(4, 10)
        self.groups = [Group(g) for g in range(self.L)]
        self.nodes: Dict[int, Node] = {}
        self.outcomes: Dict[int, Tuple[int, ...]] = {}  # step -> the nodes that committed it
        self.epochs: List[Tuple[int, int, str, Tuple[int, ...]]] = []
        self.retreats = 0
        initial = r.randint(1, 3)
        horizon = self.steps * 600
        for i in range(1, initial + 1):
            self.nodes[i] = Node(i, [Rank(member=True) for _ in range(self.L)], founder=True, in_job=True)
        for g in self.groups:
            g.members = list(range(1, initial + 1))
        for i in range(1, initial + 1):
            self.start(self.nodes[i])
        for j in range(r.randint(1, 2)):
            # a joiner's local ranks reach the coordinator at different times: one of them
            # sometimes much later (a slow import, a slow TLS handshake)
            delays = [r.randint(0, 40) for _ in range(self.L)]
            if r.random() < 0.5:
                delays[r.randrange(self.L)] += r.choice([r.randint(50, 900), r.randint(900, 4000), r.randint(4000, 20000)])
            self.at(r.randint(0, horizon), lambda i=10 + j, d=delays: self.start_joiner(i, d))
        victims = [i for i in range(2, initial + 1)] + [10, 11]  # node1 is never killed nor lost
        t = r.randint(0, horizon)
        for _ in range(r.randint(0, 3)):
            kind = r.choice(["kill", "freeze", "freeze", "long freeze"])
            if kind == "kill":
                self.at(t, lambda v=r.choice(victims): self.kill(v))
            elif kind == "freeze":
                self.at(t, lambda v=r.choice(list(range(1, initial + 1)) + [10, 11]), d=r.randint(100, 1900):
                        self.freeze(v, d))
            else:
                self.at(t, lambda v=r.choice(victims[:-2] or [1]), d=r.randint(2500, 5000): self.freeze(v, d, long=True))
            t += r.choice([r.randint(0, 300), r.randint(300, horizon)])
        self.log(f"L {self.L} steps {self.steps} nodes {initial}")

    # --- the event loop --------------------------------------------------------------------------

    def run(self) -> None:
        self.run_events(self.steps * 600 * 20 + 100_000)
        self.finish()

    def describe(self) -> str:
        return ", ".join(f"node{n.ident} {n.status} step {n.step}" for n in self.nodes.values())

    def finish(self) -> None:
        times = [0] + self.nodes[1].commit_times
        gap, at = max((b - a, a) for a, b in zip(times, times[1:]))
        if gap > HELD_UP_MS:
            self.now = at
            self.fail(f"node1 committed nothing for {gap} ms: the job was held up")
        for n in self.nodes.values():
            if n.status in ("running", "leaving"):
                self.fail(f"stalled: node{n.ident} waits with nothing left to happen ({self.describe()})")
            if n.status == "stopped" and not any(o.status == "done" for o in self.nodes.values()):
                self.fail(f"node{n.ident} stopped: {n.why}")
            if n.status == "done" and n.step != self.steps + 1:
                self.fail(f"node{n.ident} ended at step {n.step}")

    # --- nodes: the mesh and the trainer's loop ---------------------------------------------------

    def start(self, node: Node) -> None:
        node.gen = self.program(node)
        self.resume(node, node.token)

    def start_joiner(self, ident: int, delays: List[int]) -> None:
        node = Node(ident, [Rank() for _ in range(self.L)], founder=False)
        self.nodes[ident] = node
        self.log(f"node{ident} starts (joiner, ranks register after {delays} ms)")
        calls = []
        for g, d in enumerate(delays):
            call = Call(ident, g, "join")
            node.ranks[g].call = call
            calls.append(call)
            self.at(self.now + d, lambda c=call: self.register(c))
        node.registered = self.now + max(delays)
        node.gen = self.joiner_program(node)
        self.resume(node, node.token)

    def wake(self, node: Node, token: int, delay: int = 1) -> None:
        self.at(self.now + delay, lambda: self.resume(node, token))

    def resume(self, node: Node, token: int) -> None:
        if token != node.token or node.status not in ("running", "leaving"):
            return
        if self.now < node.frozen_until:
            self.at(node.frozen_until, lambda: self.resume(node, token))
            return
        node.token += 1
        try:
            what = next(node.gen)
        except StopIteration:
            return
        if isinstance(what, Sleep):
            self.wake(node, node.token, what.ms)
        else:
            node.awaiting = what.calls
            if all(c.done for c in what.calls):
                self.wake(node, node.token)
            elif what.limit is not None:
                self.wake(node, node.token, what.limit)

    def answered(self, call: Call, error: Optional[str] = None, result: Any = None) -> None:
        if call.done:
            return
        call.done, call.error, call.result = True, error, result
        node = self.nodes[call.node]
        if call in node.awaiting and all(c.done for c in node.awaiting):
            self.wake(node, node.token)

    def joiner_program(self, node: Node) -> Iterator[Any]:
        yield from self.membership(node, joining=True)
        if node.status != "running":
            return
        yield from self.program(node, joined=True)

    def program(self, node: Node, joined: bool = False) -> Iterator[Any]:
        """The trainer's outer loop, as far as membership goes (train.py, membership.settle)."""
        trained = joined
        while node.step <= self.steps:
            if not trained:
                yield Sleep(self.rng.randint(200, 800))
                trained = True
            pending = min(len(g.joiners) for g in self.groups)  # mesh.groups().pending: the fewest of its groups
            rows = yield from self.collective(node, ("roster", 0), (node.ident, node.step, pending))
            if rows is None:
                yield from self.update(node)
                continue
            node.step = max(r[1] for r in rows)  # a node behind receives the job's state (state sync)
            if any(r[2] > 0 for r in rows):
                yield from self.update(node)
                continue
            members = yield from self.collective(node, ("reduce", node.step), (node.ident,))
            if members is None:
                yield from self.update(node)
                continue
            self.commit(node, tuple(r[0] for r in members))
            trained = False
        node.status = "leaving"
        calls = []
        for g, rank in enumerate(node.ranks):
            call = Call(node.ident, g, "leave")
            rank.call = call
            calls.append(call)
            self.send(call, self.arrive)
        yield Await(calls, OP_TIMEOUT_MS)
        node.status, node.in_job = "done", False
        self.log(f"node{node.ident} done")
        for g, rank in enumerate(node.ranks):
            self.gone(node.ident, self.groups[g], "closed")

    def collective(self, node: Node, key: Tuple[str, int], payload: Tuple[int, ...]) -> Iterator[Any]:
        """The same operation in every group of the node; its result (the members' payloads, sorted)
        when every group committed it with the same rows, else None."""
        calls = []
        for g in range(self.L):
            call = Call(node.ident, g, "op", key=key, payload=payload)
            calls.append(call)
            self.send(call, self.op)
        yield Await(calls)
        if any(c.error for c in calls):
            return None
        tables = [c.result for c in calls]
        if key[0] == "reduce":
            nodes = {tuple(r[0] for r in t) for t in tables}
            if len(nodes) > 1:
                self.fail(f"node{node.ident}'s groups committed step {key[1]} with different nodes: {sorted(nodes)}")
        return tables[0] if all(t == tables[0] for t in tables) else None

    def commit(self, node: Node, members: Tuple[int, ...]) -> None:
        step = node.step
        if self.outcomes.setdefault(step, members) != members:
            self.fail(f"step {step} committed with nodes {self.outcomes[step]} and with {members}")
        if node.committed and step <= node.committed[-1]:
            self.fail(f"node{node.ident} commits step {step} after step {node.committed[-1]}")
        node.committed.append(step)
        node.commit_times.append(self.now)
        node.step += 1
        self.log(f"node{node.ident} commits step {step} with {members}")

    def update(self, node: Node) -> Iterator[Any]:
        """mesh.update(): every rank updates its group (a rank without a communicator joins)."""
        joining = not any(r.member for r in node.ranks)
        for g, rank in enumerate(node.ranks):
            rank.call = Call(node.ident, g, "join" if not rank.member else "update", epoch=rank.epoch)
            self.send(rank.call, self.register if not rank.member else self.arrive)
        yield from self.membership(node, joining)

    def membership(self, node: Node, joining: bool) -> Iterator[Any]:
        """ElasticDeviceMesh._membership over the node's ranks, whose calls are made: polls until the
        rule admits the node (or stops it)."""
        rules = [a.Admission(self.now, ADMIT_SKEW_MS, ADMIT_TIMEOUT_MS, joining) for _ in node.ranks]
        while True:
            yield Await([r.call for r in node.ranks if r.call is not None], POLL_MS)
            states = []
            for g, (rank, rule) in enumerate(zip(node.ranks, rules)):
                state = self.state(node.ident, g)
                if state in (a.ADMITTED, a.DUE):
                    rank.member = True
                    if rank.call.result is not None:  # the epoch that answered it (not a timeout's)
                        rank.epoch = rank.call.result
                step = rule.step(state)
                if step == "update":
                    if state == a.DUE:
                        self.log(f"node{node.ident} rank {g} updates: its group waits for it")
                    rank.call, state = Call(node.ident, g, "update", epoch=rank.epoch), a.WAITING
                    self.send(rank.call, self.arrive)
                elif step == "leave":  # on a thread of its own, as the call it replaces
                    rank.call, state = Call(node.ident, g, "leave"), a.WAITING
                    self.send(rank.call, self.arrive)
                states.append(state)
            gathered = [rule.report(state, self.now) for rule, state in zip(rules, states)]
            verdicts = {rule.decide(gathered, self.now) for rule in rules}
            if len(verdicts) != 1:
                self.fail(f"node{node.ident}'s ranks decided differently: {verdicts}")
            verdict = verdicts.pop()
            if verdict is a.Verdict.ADMITTED:
                for g in range(self.L):
                    if node.ident not in self.groups[g].members:
                        self.fail(f"node{node.ident} admitted while its rank {g} is not a member of group {g}")
                node.in_job, node.lost = True, False
                origins = {g.origin for g in self.groups}
                self.log(f"node{node.ident} admitted (epochs {[g.epoch for g in self.groups]}, {origins})")
                if origins & {"after leave", "after loss"}:
                    # newcomers alone: the trainer stops a node that finds the job gone (membership.diloco)
                    node.why = f"the job's nodes are gone ({origins})"
                    self.stop(node)
                return
            if verdict in (a.Verdict.FATAL, a.Verdict.EXPIRED):
                self.fail(f"node{node.ident}'s membership call {'failed' if verdict is a.Verdict.FATAL else 'expired'} "
                          f"({[(c.kind, c.done, c.error) for c in (r.call for r in node.ranks) if c]})")
            if verdict is a.Verdict.RETREAT:
                if node.in_job:
                    self.fail(f"node{node.ident}, alive and in the job, retreats (leaves its groups)")
                self.retreats += 1
                self.log(f"node{node.ident} retreats (ranks {states})")
            if verdict is a.Verdict.NUDGE:
                self.log(f"node{node.ident} nudges its groups (ranks {states})")
            if verdict is a.Verdict.REJOIN:
                self.log(f"node{node.ident} joins again")
                for g, rank in enumerate(node.ranks):
                    rank.member, rank.call = False, Call(node.ident, g, "join")
                    self.send(rank.call, self.register)
            if node.status != "running":
                return

    def state(self, ident: int, g: int) -> str:
        """How a rank's membership call stands, as the mesh sees it (wccl.torch: _call_state)."""
        rank = self.nodes[ident].ranks[g]
        call = rank.call
        if call is None:
            return a.OUT
        if not call.done:
            return a.WAITING
        if call.kind == "leave":  # left (or gave up waiting for the barrier): closed either way
            self.gone(ident, self.groups[g], "closed")
            rank.member, rank.call = False, None
            return a.OUT
        if call.error is not None and call.error != "timeout":
            return a.FAILED
        if call.error is not None:  # a join that timed out is in no group; an update still waits at the barrier
            return a.TIMEOUT if call.kind == "join" else a.DUE
        group = self.groups[g]
        if ident not in group.members or group.revoked or (group.arrivals and ident not in group.arrivals):
            return a.DUE  # Communicator.update_due: removed (lost), revoked, or a barrier begun
        return a.ADMITTED

    def send(self, call: Call, to: Callable[[Call], None]) -> None:
        """A rank's call reaches the coordinator a few ms later (each rank is a process of its own:
        a node frozen meanwhile sends it when it resumes)."""
        node = self.nodes[call.node]

        def deliver() -> None:
            if self.now < node.frozen_until:
                self.at(node.frozen_until, deliver)
            elif node.status != "dead":
                to(call)
        self.at(self.now + self.rng.choice([self.rng.randint(0, 20), self.rng.randint(0, 300)]), deliver)

    # --- the coordinator, one group at a time ---------------------------------------------------

    def register(self, call: Call) -> None:
        node = self.nodes[call.node]
        if node.status == "dead" or call.done:
            return
        g = self.groups[call.group]
        g.joiners[call.node] = call
        g.last_join = self.now
        self.log(f"node{call.node} waits to join group {g.index}")
        if not g.members:
            self.at(self.now + SETTLE_MS, lambda: self.form_alone(g))
        self.at(self.now + JOIN_TIMEOUT_MS, lambda: self.join_timeout(g, call))

    def join_timeout(self, g: Group, call: Call) -> None:
        if not call.done and g.joiners.get(call.node) is call:
            del g.joiners[call.node]
            self.answered(call, "timeout")

    def form_alone(self, g: Group) -> None:
        """A group without a member: its joiners form an epoch once none arrived for the settle time."""
        if g.members or not g.joiners or self.now - g.last_join < SETTLE_MS:
            return
        origin = {"left": "after leave", "lost": "after loss"}[g.last_gone]
        self.form(g, [], origin)

    def arrive(self, call: Call) -> None:
        """An update or a leave reaches the group's barrier."""
        g = self.groups[call.group]
        if self.nodes[call.node].status == "dead":
            return
        if call.kind == "update" and call.epoch < g.epoch and call.node in g.members:
            self.answered(call, None, g.epoch)  # an update naming an older epoch is answered with the current
            return
        if call.node not in g.members:
            if call.kind == "leave":
                g.joiners.pop(call.node, None)
                self.answered(call)
            else:  # a node declared lost: its update makes it a joiner again
                self.register(call)
            return
        g.arrivals[call.node] = call
        for c in list(g.ops.values()):  # operations past the barrier's count: OP_FAILED
            self.op_failed(c.node, g)
        self.at(self.now + OP_TIMEOUT_MS, lambda: self.barrier_timeout(g, call))
        self.check_barrier(g)

    def barrier_timeout(self, g: Group, call: Call) -> None:
        if not call.done and g.arrivals.get(call.node) is call:
            self.answered(call, "timeout")  # still at the barrier: its update made again finds it there

    def check_barrier(self, g: Group) -> None:
        if g.members and all(m in g.arrivals for m in g.members):
            stay = [m for m in g.members if g.arrivals[m].kind != "leave"]
            if not stay:
                g.last_gone = "left"
            self.form(g, stay, "continues" if stay else "after leave")

    def form(self, g: Group, stay: List[int], origin: str) -> None:
        joiners = list(g.joiners)
        changed = joiners or stay != g.members or g.revoked
        answered = list(g.arrivals.values()) + list(g.joiners.values())
        g.members = stay + joiners
        g.arrivals, g.joiners, g.ops = {}, {}, {}
        g.revoked = False
        if changed:
            g.epoch += 1
            g.origin = origin
            self.epochs.append((g.index, g.epoch, origin, tuple(g.members)))
            self.log(f"group {g.index} epoch {g.epoch} ({origin}): {g.members}")
            if origin != "continues" and g.members:
                holders = [n.ident for n in self.nodes.values() if n.in_job and n.status == "running" and not n.lost]
                if holders:
                    self.fail(f"group {g.index} formed an epoch of newcomers alone ({origin}: {g.members}) while "
                              f"node(s) {holders} of the job are alive and in it")
        for call in answered:
            self.answered(call, None, g.epoch)
        if not g.members and g.joiners:
            self.at(self.now + SETTLE_MS, lambda: self.form_alone(g))

    def op(self, call: Call) -> None:
        g = self.groups[call.group]
        if call.node not in g.members or g.revoked or g.arrivals:
            self.answered(call, "lost")
            if call.node in g.members and not g.revoked:
                self.op_failed(call.node, g)  # past the barrier's count: OP_FAILED
            return
        g.ops[call.node] = call
        self.at(self.now + OP_TIMEOUT_MS, lambda: self.op_timeout(g, call))
        if set(g.ops) == set(g.members):
            keys = {c.key for c in g.ops.values()}
            if len(keys) > 1:
                self.fail(f"group {g.index}'s members called different operations: {keys}")
            table = sorted(c.payload for c in g.ops.values())
            calls, g.ops = list(g.ops.values()), {}
            for c in calls:
                self.answered(c, None, table)

    def op_timeout(self, g: Group, call: Call) -> None:
        if not call.done and g.ops.get(call.node) is call:
            self.answered(call, "timeout")
            g.ops.pop(call.node)
            self.op_failed(call.node, g)

    def op_failed(self, ident: int, g: Group) -> None:
        """A member reports OP_FAILED (an operation past the barrier's count, or timed out): the
        coordinator revokes the epoch."""
        if ident in g.members and not g.revoked:
            self.revoke(g)

    def revoke(self, g: Group) -> None:
        g.revoked = True
        self.fail_ops(g)

    def fail_ops(self, g: Group) -> None:
        calls, g.ops = list(g.ops.values()), {}
        for c in calls:
            self.answered(c, "lost")

    def gone(self, ident: int, g: Group, how: str) -> None:
        """A node's communicator leaves the group: lost, or closed (after a leave)."""
        g.joiners.pop(ident, None)
        g.arrivals.pop(ident, None)
        if ident in g.members:
            g.members.remove(ident)
            g.last_gone = "lost" if how == "lost" else "left"
            if how == "lost":
                self.revoke(g)
            if g.members:
                self.check_barrier(g)
            elif g.joiners:
                self.at(self.now + SETTLE_MS, lambda: self.form_alone(g))

    # --- faults ----------------------------------------------------------------------------------

    def stop(self, node: Node) -> None:
        node.status, node.in_job = "stopped", False
        self.log(f"node{node.ident} stops: {node.why}")
        for g in self.groups:
            self.gone(node.ident, g, "closed")

    def lose(self, ident: int) -> None:
        node = self.nodes[ident]
        node.lost, node.in_job = True, False
        for r in node.ranks:
            r.member = r.member and node.status != "dead"
        self.log(f"node{ident} lost")
        for g in self.groups:
            self.gone(ident, g, "lost")

    def kill(self, ident: int) -> None:
        node = self.nodes.get(ident)
        if node is None or node.status not in ("running", "leaving"):
            return
        self.log(f"node{ident} SIGKILLed")
        node.status, node.in_job = "dead", False
        self.at(self.now + KILL_DETECT_MS, lambda: self.lose(ident))

    def freeze(self, ident: int, ms: int, long: bool = False) -> None:
        node = self.nodes.get(ident)
        if node is None or node.status != "running" or self.now < node.frozen_until:
            return
        if long and (ident == 1 or any(r.call is not None and not r.call.done and r.call.kind != "op" for r in node.ranks)):
            ms = PEER_TIMEOUT_MS // 2  # frozen past the peer timeout only outside membership calls
        self.log(f"node{ident} frozen {ms} ms")
        node.frozen_until = self.now + ms
        if ms >= PEER_TIMEOUT_MS:
            self.at(self.now + PEER_TIMEOUT_MS, lambda: self.lose(ident) if node.status == "running" else None)


def run(seed: int, verbose: bool = False) -> Sim:
    sim = Sim(seed, verbose)
    sim.run()
    return sim


def failures(seeds, verbose: bool = False) -> List[str]:
    """The violations of the runs of ``seeds``, one line each."""
    return seeded.failures(lambda seed: run(seed, verbose), seeds)


def main(argv: Optional[List[str]] = None) -> int:
    return seeded.main(__doc__, lambda seed, verbose, args: run(seed, verbose), argv)


if __name__ == "__main__":
    sys.exit(main())
