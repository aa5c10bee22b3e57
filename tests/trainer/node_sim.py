"""A seeded simulation of a DiLoCo job at the node level (docs/trainer.md, "The node level, simulated").

Every simulated node runs the trainer's own rules, ``membership.diloco`` (``settle`` inside it), and
its calls are answered by a model of the ElasticDeviceMesh over wccl: a coordinator with one epoch
at a time, update barriers that admit the joiners waiting, collectives that commit only when every
member of the epoch makes the same call, a state sync that re-forms its survivors when a member is
lost in it, and a coordinator that can be down for a while. Nodes are whole here (the mesh keeps a
node's groups together: docs/trainer.md, "Membership"); what is simulated is the protocol between
nodes. Faults are drawn from the seed at random times: a node SIGKILLed, a node frozen (shorter or
longer than the peer timeout), the coordinator killed and restarted, a non-finite pseudo-gradient,
joiners (one of them sometimes with another configuration), two faults close together.

Checked on every run: no collective pairs different calls; the nodes of an all-reduce hold the same
model at the same step, and the step divides by the nodes whose pseudo-gradient is in the sum; an
outer step is committed with one model only, each node commits each step at most once and in order,
and no node receives a state the job never had or goes back; a misfit is refused and nobody else is;
the job finishes (no stall), with every node that ends holding the same model at the last step.

    python3 tests/trainer/node_sim.py --seeds 500           # seeds 1..500, a line per failure
    python3 tests/trainer/node_sim.py --seed 17 --verbose   # one run, every event
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Tuple

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "diloco"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import membership as m  # noqa: E402
import seeded  # noqa: E402

Violation = seeded.Violation  # what Sim.fail raises

PEER_TIMEOUT_MS = 2000     # a silent node (frozen) is declared lost this long after it went quiet
KILL_DETECT_MS = 50        # a killed node's connections close at once
SETTLE_MS = 100            # joiners with no live member form an epoch after this (the coordinator's settle)
ADMIT_TIMEOUT_MS = 60_000  # the mesh's admit_timeout: a node not admitted by then stops
FP = m.configuration_fingerprint(local_size=2, dim=96, inner_steps=8, wire="int8")
MISFIT_FP = m.configuration_fingerprint(local_size=2, dim=96, inner_steps=4, wire="int8")


@dataclass
class Epoch:
    number: int
    members: List[int]
    limit: Optional[int] = None                          # operations from this count on fail (a barrier began)
    revoked: bool = False
    arrived: Dict[int, int] = field(default_factory=dict)  # node -> operations it ran, at the update barrier
    slots: Dict[int, Dict[int, object]] = field(default_factory=dict)  # operation -> node -> its call
    done: set = field(default_factory=set)                 # operations decided
    reforming: Optional[int] = None                        # a state sync's operation re-forming after a loss


@dataclass
class Node:
    ident: int
    fingerprint: int
    status: str = "starting"   # running, done, dead, refused, stopped
    pos: m.Position = field(default_factory=m.Position)
    gen: object = None
    epoch: Optional[Epoch] = None
    ops: int = 0
    frozen_until: int = 0
    outer: str = "init"          # the model every node starts from (one seed)
    delta: Optional[Tuple[int, int, str]] = None
    received: Optional[Tuple[tuple, int]] = None
    committed: List[int] = field(default_factory=list)
    waiting_since: Optional[int] = None  # waiting for admission since
    pending_seen: int = 0
    origin: int = m.CONTINUES        # how its epoch was formed, as the EPOCH that admitted it said
    state_wait_since: Optional[int] = None  # since when no node of its epoch holds the job's state


class Sim(seeded.EventLoop):
    def __init__(self, seed: int, verbose: bool = False, late_faults: bool = False) -> None:
        super().__init__(seed, verbose)
        self.nodes: Dict[int, Node] = {}
        self.epoch: Optional[Epoch] = None
        self.epochs = 0
        self.joiners: List[int] = []
        self.last_join = 0
        self.coordinator_up_at = 0       # down while now < this
        self.deferred_losses: List[int] = []
        self.last_gone = "lost"  # how the last member to go from the group went: "lost" or "left"
        self.history: Dict[int, str] = {0: "init"}   # outer step -> the model it committed
        self.committers: Dict[int, set] = {}          # outer step -> the nodes that committed it
        self.nan_at: set = set()                       # (node, sync) whose pseudo-gradient is not finite
        self.misfits: set = set()
        r = self.rng
        self.fragments = r.choice([1, 1, 2])
        self.syncs = self.fragments * r.randint(3, 6)
        self.probe = r.random() < 0.5     # the all-reduce carries the joiners' count (streaming's probe)
        self.train_ms = (700, 1300)
        initial = r.randint(2, 4)
        horizon = self.syncs * 1000
        for i in range(initial):
            self.start_node(i + 1)
        protected = r.randint(1, initial)  # one node that holds the job's state is never killed
        for j in range(r.randint(0, 2)):
            ident = 10 + j
            misfit = r.random() < 0.15
            if misfit:
                self.misfits.add(ident)
            self.at(r.randint(0, horizon // 2), lambda i=ident, mf=misfit: self.start_node(i, True, mf))
        # Faults end by the middle of the job unless late_faults: a node that comes back after the
        # others finished and left trains the remaining steps alone (docs/trainer.md, "Not done").
        last = horizon if late_faults else horizon // 2
        faults = r.randint(1, 3)
        t = r.randint(0, last * 8 // 10)
        for _ in range(faults):
            if t >= last:
                break
            kind = r.choice(["kill", "freeze", "freeze", "coordinator", "nan"])
            victims = [i for i in list(range(1, initial + 1)) + [10, 11] if i != protected]
            if kind == "kill":
                self.at(t, lambda v=r.choice(victims): self.kill(v))
            elif kind == "freeze":
                ms = r.choice([r.randint(200, 1500), r.randint(2500, 6000)])
                ms = ms if late_faults else min(ms, max(200, last - t))
                self.at(t, lambda v=r.choice(range(1, initial + 1)), d=ms: self.freeze(v, d))
            elif kind == "coordinator":
                self.at(t, lambda d=r.randint(300, 4000): self.coordinator_down(d))
            else:
                self.nan_at.add((r.choice(range(1, initial + 1)), r.randrange(self.syncs)))
            # two faults close together, or apart
            t += r.choice([r.randint(0, 300), r.randint(300, max(301, last // 2))])
        # A fault that strikes a node as it makes a call: a donor in its state sync, a node in its
        # all-reduce, at its update barrier or in a roster (its n-th such call).
        self.triggers: List[list] = []
        for _ in range(r.choice([0, 1, 1, 2])):
            self.triggers.append([r.choice(["kill", "freeze"]), r.choice([m.Sync, m.Reduce, m.Update, m.Roster]),
                                  r.randint(1, 4)])
        if self.misfits or r.random() < 0.3:
            # Every node holding the job's state cut off (a region gone dark) as a donor sends it to a
            # joiner: the joiners are left alone with none of it.
            self.triggers.append(["cut off holders", m.Sync, r.randint(1, 2)])
        self.last = last
        self.late_faults = late_faults
        self.protected = protected
        self.log(f"nodes {initial} syncs {self.syncs} fragments {self.fragments} probe {self.probe} protected {protected} "
                 f"nan {sorted(self.nan_at)} misfits {sorted(self.misfits)} triggers {self.triggers}")
        # The first epoch: the initial nodes, formed as the coordinator does once they all joined.
        self.form([], list(range(1, initial + 1)), m.FIRST)

    # --- the event loop --------------------------------------------------------------------------

    def run(self) -> None:
        self.run_events(self.syncs * 1000 * 40 + 200_000)
        self.finish()

    def describe(self) -> str:
        return ", ".join(f"node{n.ident} {n.status} step {n.pos.step}" for n in self.nodes.values())

    def finish(self) -> None:
        for n in self.nodes.values():
            if n.status in ("running", "starting"):
                self.fail(f"stalled: node{n.ident} waits with nothing left to happen ({self.describe()})")
            if n.status == "refused" and n.ident not in self.misfits:
                self.fail(f"node{n.ident} was refused with the job's own configuration")
            if n.ident in self.misfits and n.status == "done":
                self.fail(f"node{n.ident}, a misfit, trained with the job")
        ended = [n for n in self.nodes.values() if n.status == "done"]
        for n in ended:
            if n.pos.step != self.syncs or n.outer != self.history[self.syncs]:
                self.fail(f"node{n.ident} ended at step {n.pos.step} with another model than the job's")
        protected = self.nodes[self.protected]
        if protected.status != "done" and not (protected.status == "stopped" and (ended or self.state_gone())):
            self.fail(f"node{self.protected}, never killed, did not finish ({self.describe()})")

    def state_gone(self) -> bool:
        """No live node holds the job's state, and a node that held it, or may have (a founder), was
        killed: a job that then stops (no checkpoint here) has lost nothing a node could still give
        it. (A job whose nodes all live and that nobody began must begin.)"""
        live = [n for n in self.nodes.values() if n.status != "dead"]
        dead = [n for n in self.nodes.values() if n.status == "dead"]
        return all(n.pos.fresh for n in live) and any(not n.pos.fresh or n.pos.founder for n in dead)

    # --- nodes -----------------------------------------------------------------------------------

    def start_node(self, ident: int, joiner: bool = False, misfit: bool = False) -> None:
        node = Node(ident, MISFIT_FP if misfit else FP)
        if joiner:  # the job's first nodes start from one seed; a joiner's model is its own until it syncs
            node.outer = f"fresh{ident}"
        self.nodes[ident] = node
        node.gen = m.diloco(node.pos, ident, syncs=self.syncs, fragments=self.fragments, fingerprint=node.fingerprint)
        if joiner:  # its mesh joins before the loop's first call
            self.log(f"node{ident} starts (joiner{' misfit' if misfit else ''})")
            self.register(node)

    def reply(self, node: Node, value: object, delay: int = 0) -> None:
        def deliver() -> None:
            if node.status not in ("running", "starting"):
                return
            if self.now < node.frozen_until:
                self.at(node.frozen_until, deliver)
                return
            self.advance(node, value)
        self.at(self.now + delay, deliver)

    def advance(self, node: Node, value: object) -> None:
        node.status = "running"
        try:
            call = node.gen.send(value)
        except (StopIteration, m.Refused, m.Stopped) as e:
            self.end(node, e)
            return
        self.log(f"node{node.ident} {call}")
        self.answer(node, call)

    def end(self, node: Node, how: BaseException) -> None:
        """The node's loop returned (done), or it was refused or stopped: it leaves."""
        node.status = {StopIteration: "done", m.Refused: "refused"}.get(type(how), "stopped")
        self.log(f"node{node.ident} {node.status} at step {node.pos.step}: {how}")
        if isinstance(how, m.Refused) and node.ident not in self.misfits:
            self.fail(f"node{node.ident} refused: {how}")
        if isinstance(how, m.Stopped):
            ended = any(n.status == "done" for n in self.nodes.values())
            holders = [n.ident for n in self.nodes.values() if n.status in ("running", "starting") and not n.pos.fresh
                       and n.pos.step >= node.pos.known_step]
            if how.job_ended and not ended:
                self.fail(f"node{node.ident} stopped, though no node finished the job: {how}")
            if not how.job_ended and holders:
                self.fail(f"node{node.ident} stopped while node(s) {holders} held the job's state: {how}")
            if not how.job_ended:  # it closes its groups without leaving: lost, to the coordinator
                self.at(self.now + KILL_DETECT_MS, lambda: self.lose(node.ident, "closed"))
                return
        self.leave(node)

    def answer(self, node: Node, call: object) -> None:
        r = self.rng
        for trigger in self.triggers:
            kind, kind_of_call, _ = trigger
            if not isinstance(call, kind_of_call) or (kind == "kill" and node.ident == self.protected):
                continue
            if isinstance(call, m.Sync) and call.mode != m.SEND_ONLY:
                continue  # a donor
            trigger[2] -= 1
            if trigger[2] == 0 and self.now < self.last:
                self.triggers.remove(trigger)
                ms = r.randint(2500, 6000)
                ms = ms if self.late_faults else min(ms, max(200, self.last - self.now))
                if kind == "kill":
                    fault = lambda: self.kill(node.ident)  # noqa: E731
                elif kind == "freeze":
                    fault = lambda: self.freeze(node.ident, ms)  # noqa: E731
                else:
                    fault = lambda: [self.freeze(n.ident, ms) for n in list(self.nodes.values())  # noqa: E731
                                     if n.status == "running" and not n.pos.fresh]
                self.at(self.now + r.randint(0, 60), fault)
            break
        if isinstance(call, (m.Joined, m.Record)):
            self.reply(node, None)
        elif isinstance(call, m.Train):
            node.delta = (node.ident, call.step, node.outer)
            diverged = (node.ident, call.step) in self.nan_at
            self.nan_at.discard((node.ident, call.step))  # once: the step trained again is finite
            self.reply(node, not diverged, r.randint(*self.train_ms))
        elif isinstance(call, m.Discard):
            node.delta = None
            self.reply(node, None)
        elif isinstance(call, m.Commit):
            self.commit(node, call)
            self.reply(node, None)
        elif isinstance(call, m.Update):
            self.update(node)
        elif isinstance(call, m.Wait):
            if node.state_wait_since is None:
                node.state_wait_since = self.now
            self.reply(node, self.now - node.state_wait_since > ADMIT_TIMEOUT_MS, 1000)
        else:
            if isinstance(call, m.Sync):
                node.state_wait_since = None  # a node holding the state is here (as train.py counts)
            self.collective(node, call)

    def commit(self, node: Node, call: m.Commit) -> None:
        assert node.received is not None
        total, senders = node.received
        if call.divisor != senders:
            self.fail(f"node{node.ident} divides sync {call.sync}'s sum of {senders} pseudo-gradients by {call.divisor}")
        if call.divisor == 0:
            return
        step = node.pos.step
        if node.committed and node.committed[-1] >= step:
            self.fail(f"node{node.ident} commits step {step} after step {node.committed[-1]}")
        node.committed.append(step)
        before = node.outer
        node.outer = f"S{step}:{m.hash63(repr((before, total, call.divisor))) & 0xffffffff:08x}"
        known = self.history.setdefault(step, node.outer)
        if known != node.outer:
            # Allowed only as a roll-back: the nodes that held the later steps are all dead (with no
            # checkpoint here, their work is gone), and this node goes on from a state the job had.
            later = [i for s, nodes in self.committers.items() if s >= step for i in nodes]
            if self.history.get(step - 1) != before or any(self.nodes[i].status != "dead" for i in later):
                self.fail(f"step {step} committed with two models (node{node.ident} forked the job's history)")
            self.log(f"the job rolls back to step {step - 1}: the nodes that held later steps are dead")
            for s in [s for s in self.history if s >= step]:
                del self.history[s]
                self.committers.pop(s, None)
            self.history[step] = node.outer
        self.committers.setdefault(step, set()).add(node.ident)

    # --- the coordinator: epochs, barriers, joiners, losses ----------------------------------------

    def coordinator_is_up(self) -> bool:
        return self.now >= self.coordinator_up_at

    def form(self, arrivals: List[int], joiners: List[int], origin: int = m.CONTINUES) -> None:
        self.epochs += 1
        epoch = Epoch(self.epochs, arrivals + joiners)
        self.epoch = epoch
        self.log(f"epoch {epoch.number}: {epoch.members}{' origin %d' % origin if origin else ''}")
        for ident in epoch.members:
            node = self.nodes[ident]
            node.epoch, node.ops, node.waiting_since, node.origin = epoch, 0, None, origin
            if node.status == "starting":  # the epoch its join entered
                node.pos.joined_origin = origin
                node.pos.founding = len(epoch.members) if origin in (m.FIRST, m.AFTER_LEAVE) else 0
            self.reply(node, None, self.rng.randint(5, 30))

    def register(self, node: Node) -> None:
        if node.ident not in self.joiners:
            self.joiners.append(node.ident)
            self.last_join = self.now
        node.waiting_since = node.waiting_since if node.waiting_since is not None else self.now
        self.at(self.now + ADMIT_TIMEOUT_MS, lambda n=node, since=node.waiting_since: self.admit_timeout(n, since))
        self.at(self.now + SETTLE_MS, self.form_first)

    def admit_timeout(self, node: Node, since: int) -> None:
        if node.status in ("running", "starting") and node.waiting_since == since:
            node.status = "stopped"
            self.log(f"node{node.ident} stops: not admitted within admit_timeout")
            if node.ident in self.joiners:
                self.joiners.remove(node.ident)
            if any(n.status in ("running", "starting") for n in self.nodes.values()) or \
                    node.ident == self.protected:
                self.fail(f"node{node.ident} was not admitted while the job ran ({self.describe()})")

    def form_first(self) -> None:
        """With no live member, the waiting joiners form an epoch of their own."""
        live = self.epoch is not None and self.epoch.members
        if live or not self.joiners or not self.coordinator_is_up() or self.now - self.last_join < SETTLE_MS:
            return
        joiners, self.joiners = self.joiners, []
        self.form([], joiners, m.AFTER_LEAVE if self.last_gone == "left" else m.AFTER_LOSS)

    def update(self, node: Node) -> None:
        epoch = self.epoch
        if epoch is None or node.epoch is not epoch or node.ident not in epoch.members:
            self.register(node)  # a joiner, or a member declared lost: it waits for admission
            return
        count = node.ops
        if epoch.reforming is not None:  # a re-forming state sync gives way to an update
            self.fail_reform(epoch)
        if not epoch.arrived:
            epoch.limit = count
            if any(self.nodes[i].ops > count for i in epoch.members):
                self.revoke(epoch)
            else:
                self.fail_from(epoch, count)
        elif count != epoch.limit:
            self.revoke(epoch)
        epoch.arrived[node.ident] = count
        self.complete_barrier()

    def complete_barrier(self) -> None:
        epoch = self.epoch
        if epoch is None or not epoch.arrived or not self.coordinator_is_up():
            return
        if any(i not in epoch.arrived for i in epoch.members):
            return
        if not self.joiners and not epoch.revoked and epoch.members:
            # Nothing changed: the same epoch is confirmed (its number, origin and operations go on)
            self.log(f"epoch {epoch.number} confirmed")
            arrived, epoch.arrived, epoch.limit = epoch.arrived, {}, None
            for ident in arrived:
                self.reply(self.nodes[ident], None, self.rng.randint(5, 30))
            return
        joiners, self.joiners = self.joiners, []
        origin = m.CONTINUES if epoch.members else m.AFTER_LEAVE if self.last_gone == "left" else m.AFTER_LOSS
        self.form([i for i in epoch.members], joiners, origin)

    def revoke(self, epoch: Epoch) -> None:
        if not epoch.revoked:
            self.log(f"epoch {epoch.number} revoked")
        epoch.revoked = True
        self.fail_from(epoch, 0)

    def fail_from(self, epoch: Epoch, first: int) -> None:
        """Every undecided operation from ``first`` on fails on the members waiting in it."""
        for k, slot in epoch.slots.items():
            if k >= first and k not in epoch.done and k != epoch.reforming:
                epoch.done.add(k)
                for ident, call in slot.items():
                    self.reply(self.nodes[ident], failure(call), self.rng.randint(1, 20))

    def lose(self, ident: int, why: str) -> None:
        """The coordinator declares node ``ident`` lost (its heartbeats stopped, or its links closed)."""
        if not self.coordinator_is_up():
            self.deferred_losses.append(ident)
            return
        node = self.nodes[ident]
        if ident in self.joiners:
            self.joiners.remove(ident)
            if node.status in ("running", "starting"):  # resumed, it hears REMOVED and registers again
                self.at(node.frozen_until, lambda: self.register(node) if node.waiting_since is not None else None)
        epoch = self.epoch
        if epoch is None or ident not in epoch.members:
            return
        self.log(f"node{ident} lost ({why})")
        epoch.members.remove(ident)
        self.last_gone = "lost"
        if epoch.arrived.pop(ident, None) is not None and self.nodes[ident].status == "running":
            self.register(self.nodes[ident])  # it hears REMOVED and updates again: a joiner now
        for k, slot in epoch.slots.items():  # its own calls fail (it hears so if it comes back)
            if k not in epoch.done and ident in slot:
                self.reply(self.nodes[ident], failure(slot.pop(ident)), 1)
        reforming = self.sync_in_flight(epoch)
        if reforming is not None:
            epoch.reforming = reforming  # the epoch is revoked; its state sync goes on once re-formed
            epoch.revoked = True
            self.fail_from(epoch, 0)
            self.try_reform(epoch)
        else:
            self.revoke(epoch)
        self.complete_barrier()
        self.at(self.now + SETTLE_MS, self.form_first)

    def leave(self, node: Node) -> None:
        if node.ident in self.joiners:
            self.joiners.remove(node.ident)
        epoch = self.epoch
        if epoch is not None and node.ident in epoch.members:
            epoch.members.remove(node.ident)
            self.last_gone = "left"
            if any(k not in epoch.done for k in epoch.slots):
                self.revoke(epoch)
            self.complete_barrier()
            self.at(self.now + SETTLE_MS, self.form_first)

    def kill(self, ident: int) -> None:
        node = self.nodes.get(ident)
        if node is None or node.status not in ("running", "starting"):
            return
        self.log(f"node{ident} SIGKILLed")
        node.status = "dead"
        self.at(self.now + KILL_DETECT_MS, lambda: self.lose(ident, "killed"))

    def freeze(self, ident: int, ms: int) -> None:
        node = self.nodes.get(ident)
        if node is None or node.status not in ("running", "starting") or self.now < node.frozen_until:
            return
        self.log(f"node{ident} frozen for {ms} ms")
        node.frozen_until = self.now + ms
        if ms > PEER_TIMEOUT_MS:
            self.at(self.now + PEER_TIMEOUT_MS, lambda: self.lose(ident, "silent"))

    def coordinator_down(self, ms: int) -> None:
        if not self.coordinator_is_up():
            return
        self.log(f"coordinator killed, back in {ms} ms")
        self.coordinator_up_at = self.now + ms
        epoch = self.epoch
        if epoch is not None and epoch.reforming is not None:
            self.fail_reform(epoch)  # the re-form needs the coordinator: the mesh sees it unreachable
        self.at(self.coordinator_up_at, self.coordinator_restarted)

    def coordinator_restarted(self) -> None:
        self.log("coordinator back")
        lost, self.deferred_losses = self.deferred_losses, []
        for ident in lost:  # those still silent (a node that came back meanwhile reconnected)
            if self.nodes[ident].status == "dead" or self.now < self.nodes[ident].frozen_until:
                self.lose(ident, "while the coordinator was down")
        self.complete_barrier()
        self.form_first()

    # --- collectives ---------------------------------------------------------------------------------

    def collective(self, node: Node, call: object) -> None:
        epoch = node.epoch
        if isinstance(call, m.Roster):
            node.pending_seen = len(self.joiners)
        if epoch is None or epoch is not self.epoch or node.ident not in epoch.members or epoch.revoked:
            if isinstance(call, m.Sync) and epoch is self.epoch and epoch is not None and \
                    epoch.reforming == node.ops and node.ident in epoch.members:
                pass  # joins the re-forming sync below
            else:
                self.reply(node, failure(call), self.rng.randint(1, 20))
                return
        k = node.ops
        node.ops += 1
        if k in epoch.done:  # failed before this node came to it
            self.reply(node, failure(call), self.rng.randint(1, 20))
            return
        if epoch.limit is not None and k >= epoch.limit:
            self.revoke(epoch)
            self.reply(node, failure(call), self.rng.randint(1, 20))
            return
        if isinstance(call, m.Reduce) and self.probe:
            node.pending_seen = len(self.joiners)
        slot = epoch.slots.setdefault(k, {})
        slot[node.ident] = call
        if epoch.reforming == k:
            self.try_reform(epoch)
        elif all(i in slot for i in epoch.members):
            self.at(self.now + self.rng.randint(5, 200 if isinstance(call, m.Reduce) else 40),
                    lambda: self.decide(epoch, k))

    def sync_in_flight(self, epoch: Epoch) -> Optional[int]:
        for k, slot in epoch.slots.items():
            if k not in epoch.done and any(isinstance(c, m.Sync) for c in slot.values()):
                return k
        return None

    def try_reform(self, epoch: Epoch) -> None:
        """The survivors of a state sync that lost a member re-form once all are in it (REFORM)."""
        k = epoch.reforming
        slot = epoch.slots[k]
        if not all(i in slot for i in epoch.members):
            return
        if not self.coordinator_is_up():
            self.fail_reform(epoch)
            return
        calls = {i: slot[i] for i in epoch.members}
        epoch.done.add(k)
        epoch.reforming = None
        self.epochs += 1
        new = Epoch(self.epochs, list(epoch.members))
        self.log(f"epoch {new.number}: {new.members} (re-formed by state sync)")
        self.epoch = new
        new.slots[0] = calls
        for i in new.members:
            self.nodes[i].epoch, self.nodes[i].ops, self.nodes[i].origin = new, 1, m.CONTINUES
        self.at(self.now + self.rng.randint(5, 40), lambda: self.decide(new, 0, reformed=True))

    def fail_reform(self, epoch: Epoch) -> None:
        k = epoch.reforming
        epoch.reforming = None
        epoch.revoked = True
        if k is not None and k not in epoch.done:
            epoch.done.add(k)
            for ident, call in epoch.slots[k].items():
                self.reply(self.nodes[ident], failure(call), self.rng.randint(1, 20))

    def decide(self, epoch: Epoch, k: int, reformed: bool = False) -> None:
        if k in epoch.done:
            return
        members = list(epoch.members)
        slot = epoch.slots[k]
        frozen = max(self.nodes[i].frozen_until for i in members)
        if self.now < frozen:  # a member's part of the data waits for its process
            self.at(frozen, lambda: self.decide(epoch, k, reformed))
            return
        if epoch is not self.epoch or epoch.revoked or any(i not in slot for i in members):
            return
        epoch.done.add(k)
        calls = [slot[i] for i in members]
        kinds = {type(c).__name__ for c in calls}
        if len(kinds) > 1:
            self.fail(f"epoch {epoch.number} operation {k}: the nodes made different calls: "
                      + ", ".join(f"node{i} {slot[i]}" for i in members))
        if isinstance(calls[0], m.Roster):
            rows = [m.Row.decode(i, [*slot[i].info, self.nodes[i].pending_seen, self.nodes[i].origin, epoch.number])
                    for i in members]
            for i in members:
                self.reply(self.nodes[i], rows, self.rng.randint(1, 10))
        elif isinstance(calls[0], m.Reduce):
            self.reduce(members, slot)
        else:
            self.sync(members, slot, reformed)

    def reduce(self, members: List[int], slot: Dict[int, object]) -> None:
        nodes = [self.nodes[i] for i in members]
        steps = {(n.pos.step, n.outer) for n in nodes}
        if len(steps) > 1:
            self.fail("an all-reduce of nodes at different steps or models: "
                      + ", ".join(f"node{n.ident} step {n.pos.step} {n.outer}" for n in nodes))
        deltas = []
        for n in nodes:
            if slot[n.ident].send:
                if n.delta is None or n.delta[1:] != (n.pos.step, n.outer):
                    self.fail(f"node{n.ident} sends a pseudo-gradient of another step or model: {n.delta}")
                deltas.append(n.delta)
        total = tuple(sorted(deltas))
        waiting = sum(n.pending_seen for n in nodes) if self.probe else None
        for n in nodes:
            n.received = (total, len(deltas))
            self.reply(n, (True, waiting), self.rng.randint(1, 10))

    def sync(self, members: List[int], slot: Dict[int, object], reformed: bool) -> None:
        calls = {i: slot[i] for i in members}
        held = {i: (self.nodes[i].pos.step, self.nodes[i].outer) for i in members}
        donors = [i for i in members if calls[i].mode == m.SEND_ONLY]
        popular = [i for i in members if calls[i].mode == m.POPULAR]
        if donors:
            states = {held[i] for i in donors}
            if len(states) > 1:
                self.fail(f"send-only nodes disagree: {[(i, held[i]) for i in donors]}")
            elected = states.pop()
        elif popular:
            elected = Counter(held[i] for i in popular).most_common(1)[0][0]
        elif any(calls[i].receive for i in members):
            if not reformed:  # every node receive-only: INVALID_USAGE, decided alike on every node
                self.fail(f"a state sync with no node to send: {calls}")
            for i in members:  # the donors were lost: PEER_LOST, every state as it was
                self.reply(self.nodes[i], None, self.rng.randint(1, 30))
            return
        else:
            elected = None
        for i in members:
            node = self.nodes[i]
            revision = calls[i].revision if elected is None else elected[0]
            if calls[i].receive and elected is not None:
                step, outer = elected
                if self.history.get(step) != outer:
                    self.fail(f"node{i} receives a state the job never had at step {step}")
                if not node.pos.fresh and step < node.pos.step:
                    self.fail(f"node{i} goes back from step {node.pos.step} to {step}")
                node.outer = outer
            self.reply(node, revision, self.rng.randint(1, 30))


def failure(call: object) -> object:
    """What the mesh returns when a collective did not commit on every group of the node."""
    return (False, None) if isinstance(call, m.Reduce) else None


def run(seed: int, verbose: bool = False, late_faults: bool = False) -> Sim:
    sim = Sim(seed, verbose, late_faults)
    sim.run()
    return sim


def failures(seeds, late_faults: bool = False, verbose: bool = False) -> List[str]:
    """The violations of the runs of ``seeds``, one line each."""
    return seeded.failures(lambda seed: run(seed, verbose, late_faults), seeds)


def main(argv: Optional[List[str]] = None) -> int:
    def options(p: argparse.ArgumentParser) -> None:
        p.add_argument("--late-faults", action="store_true",
                       help="let faults reach the end of the job (finds a node that comes back after it: not fixed)")
    return seeded.main(__doc__, lambda seed, verbose, args: run(seed, verbose, args.late_faults), argv, options)


if __name__ == "__main__":
    sys.exit(main())
