"""The mesh's groups under a seeded simulation (mesh_sim.py): nodes of L groups admitted by the
mesh's own rule (wccl._admission) with faults drawn at random, every rule checked; and proof that
the checks can fail: with a piece of the rule taken away (or put back as it was before the
simulation), the simulation finds what it was for."""

import functools
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import mesh_sim  # noqa: E402
import seeded  # noqa: E402

SIM = Path(__file__).with_name("mesh_sim.py")
failures = mesh_sim.failures


def test_the_documented_command_keeps_every_rule():
    """docs/trainer.md runs it with --seeds 500; the last line counts the seeds."""
    assert seeded.documented_command_tail(SIM, 500) == "500 of 500 seeds kept every rule"


def test_more_seeds_keep_every_rule():
    assert failures(range(501, 3001)) == []


def test_the_schedules_happen():
    """The seeds make what the rule is for: nodes partly admitted (a rank in, another waiting),
    retreats, nudges, idle ranks whose group waits for them, kills and nodes lost while frozen."""
    keys = ["retreats", "nudges", "joins again", "its group waits for it", "SIGKILLed", "lost"]
    seen = seeded.seeds_showing(mesh_sim.Sim, range(1, 301), keys)
    least = {"nudges": 3, "its group waits for it": 10}
    assert all(count >= least.get(key, 30) for key, count in seen.items()), seen


def with_rule(monkeypatch, *edits):
    """The simulation with each (text, replacement) applied to _admission.py's source."""
    seeded.with_edits(monkeypatch, mesh_sim, "a", edits)


RETREAT_FOR_EVERY_NODE = ("        if self.joining and any(r.failed or r.late for r in reports):",
                          "        if any(r.failed or r.late for r in reports):\n            self.joining = True")
REJOIN_WHILE_WAITING = ("            if any(r.admitted or r.waiting for r in reports):",
                        "            if any(r.admitted for r in reports):")

# What each piece of the rule is for: the edit that takes it away, and what the simulation then finds.
MUTATIONS = {
    # the mesh's rule before the simulation: every node retreats, each rank joins again once it left
    "the rule before": ([RETREAT_FOR_EVERY_NODE, REJOIN_WHILE_WAITING], "retreats (leaves its groups)"),
    # a retreating node's ranks join again only together: else the barrier of one rank's leave admits
    # another, and the node is partly admitted again, the other way round, until it gives up
    "rejoin one by one": ([REJOIN_WHILE_WAITING], "membership call expired"),
    # a node in the job never retreats (its leave could end the job's last epoch)
    "members retreat": ([RETREAT_FOR_EVERY_NODE], "alive and in the job, retreats"),
    # a joining node partly admitted for admit_skew retreats: else the job waits on its idle rank
    "no retreat": ([("        if self.joining and any(r.failed or r.late for r in reports):",
                     "        if self.joining and any(r.failed for r in reports):")], "the job was held up"),
    # a node in the job partly updated for admit_skew nudges its groups: else the others'
    # collectives wait on its idle ranks until they time out
    "no nudge": ([("        if any(r.late for r in reports):\n            self.nudging",
                   "        if False:\n            self.nudging")], "the job was held up"),
    # an idle rank whose group waits for its update makes it
    "idle when due": ([("        if call == DUE or (self.nudging", "        if (self.nudging")], "the job was held up"),
}


MUTATION_SEEDS = range(1, 2001)


@functools.lru_cache(maxsize=None)
def kept_by_the_rule():
    return failures(MUTATION_SEEDS)


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_without_a_piece_of_the_rule_the_simulation_finds_what_it_is_for(monkeypatch, name):
    """Seeds 1..2000 keep every rule; with a piece of the rule taken away, some of them fail (3 to
    80, by piece), naming what broke."""
    edits, what = MUTATIONS[name]
    assert kept_by_the_rule() == []
    with_rule(monkeypatch, *edits)
    found = failures(MUTATION_SEEDS)
    assert len(found) >= 2 and any(what in f for f in found), found[:5]


@pytest.mark.parametrize("seed", [3, 48])
def test_a_run_is_the_same_for_the_same_seed(seed):
    a, b = mesh_sim.Sim(seed), mesh_sim.Sim(seed)
    a.run()
    b.run()
    assert a.epochs == b.epochs and a.outcomes == b.outcomes
