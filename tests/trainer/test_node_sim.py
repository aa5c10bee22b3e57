"""The node level under a seeded simulation (node_sim.py): many jobs of nodes running the trainer's
own rules (membership.diloco) with faults drawn at random, every rule of the job checked; and proof
that the checks can fail: with a rule of membership.py taken away, the simulation finds the bug it
prevents."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
import node_sim  # noqa: E402
import seeded  # noqa: E402

m = node_sim.m
SIM = Path(__file__).with_name("node_sim.py")


failures = node_sim.failures


def test_the_documented_command_keeps_every_rule():
    """docs/trainer.md runs it with --seeds 500; the last line counts the seeds."""
    assert seeded.documented_command_tail(SIM, 500) == "500 of 500 seeds kept every rule"


def test_more_seeds_keep_every_rule():
    assert failures(range(501, 3001)) == []


def test_faults_happen_and_the_job_goes_through_them():
    """The seeds do make what they claim: kills, freezes past the peer timeout, coordinator restarts,
    joiners (misfits refused), state syncs re-formed after a loss, and new nodes left without the
    job's state, waiting for it."""
    keys = ["SIGKILLed", "lost (silent)", "coordinator killed", "re-formed by state sync", "starts (joiner)", "refused",
            "Wait()"]
    seen = seeded.seeds_showing(node_sim.Sim, range(1, 301), keys)
    assert all(count >= 20 for key, count in seen.items() if key != "Wait()") and seen["Wait()"] >= 2, seen


def with_rules(monkeypatch, *edits):
    """The simulation on membership.py with each (text, replacement) applied to its source: a rule
    taken away, as before its bug was fixed."""
    seeded.with_edits(monkeypatch, node_sim, "m", edits)


# Each rule of membership.py that a bug of issue 31 called for, and the text that takes it away.
MUTATIONS = {
    # bug 2: the roster taken again after a state sync (the sync may have re-formed the epoch)
    "stale divisor": ([("            continue  # the roster again: the sync may have re-formed the epoch without a lost node",
                        "            pass")], False, "pseudo-gradients by"),
    # bug 3: a node at its boundary joins the others' all-reduce (its phase is the job's)
    "phase mismatch": ([("        phase = REDUCE if any(r.phase == REDUCE and r.has_delta for r in current) else BOUNDARY",
                         "        phase = pos.phase")], False, ""),
    # bugs 8 and 9: new nodes wait for the job's state instead of beginning the job again
    "fresh state wins": ([("        if (top < pos.known_step) if current else not beginners:", "        if False:"),
                          ("                mode = POPULAR if any(r.node_id == node_id for r in beginners) else RECEIVE_ONLY",
                           "                mode = POPULAR")],
                         False, ""),
    # a node of a job that ended while it was away stops instead of training the rest alone
    "ended job": ([("        if origin == AFTER_LEAVE and pos.epoch != pos.loop_epoch and (pos.in_job or pos.joined_origin != AFTER_LEAVE):",
                    "        if False:")], True, "forked the job's history"),
    # joiners are admitted at an outer step's boundary
    "no admission": ([("        if phase == BOUNDARY and any(r.pending > 0 for r in rows):", "        if False:")],
                     False, ""),
}


@pytest.mark.parametrize("name", sorted(MUTATIONS))
def test_without_a_rule_the_simulation_finds_its_bug(monkeypatch, name):
    """Seeds that keep every rule fail once a rule is taken away: the simulation finds each bug it
    was written for, naming what broke (1000 seeds: 10 to 350 of them fail, by rule)."""
    edits, late_faults, what = MUTATIONS[name]
    seeds = range(1, 1001)
    kept = failures(seeds, late_faults)
    # With faults up to the job's end, what the rules cannot know shows too (docs/trainer.md)
    assert (len(kept) <= 15) if late_faults else (kept == []), kept
    with_rules(monkeypatch, *edits)
    found = [f for f in failures(seeds, late_faults) if f not in kept]
    assert len(found) >= 5 and any(what in f for f in found), found[:5]


@pytest.mark.parametrize("seed", [3, 17])
def test_a_run_is_the_same_for_the_same_seed(seed):
    a, b = node_sim.Sim(seed), node_sim.Sim(seed)
    a.run()
    b.run()
    assert a.history == b.history and a.epochs == b.epochs
