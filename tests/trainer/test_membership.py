"""The trainer's node-level membership rules (examples/diloco/membership.py), without I/O: one node's
settle() fed scripted mesh results, for the faults a real job meets."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "diloco"))
import membership as m  # noqa: E402

FP = m.configuration_fingerprint(local_size=2, dim=96, inner_steps=8, wire="int8")
OTHER_FP = m.configuration_fingerprint(local_size=1, dim=96, inner_steps=8, wire="int8")


def row(node_id, step, phase=m.BOUNDARY, has_delta=False, fresh=False, fingerprint=FP, pending=0):
    return m.Row(node_id, step, phase, has_delta, fresh, fingerprint, pending)


class Script:
    """Answers one node's calls from a list of (expected call type, result); records the calls."""

    def __init__(self, *steps):
        self.steps = list(steps)
        self.calls = []

    def __call__(self, call):
        self.calls.append(call)
        assert self.steps, f"unexpected call {call}"
        kind, result = self.steps.pop(0)
        assert isinstance(call, kind), f"expected {kind.__name__}, got {call}"
        return result


def settle(pos, node_id, script, *, sync_mode=False, need_update=False, fingerprint=FP):
    outcome = m.run(m.settle(pos, node_id, fingerprint=fingerprint, sync_mode=sync_mode, need_update=need_update),
                    script)
    assert not script.steps, f"calls not made: {script.steps}"
    return outcome


def test_steady_boundary():
    pos = m.Position(step=3, fresh=False)
    outcome = settle(pos, 1, Script((m.Roster, [row(1, 3), row(2, 3)])))
    assert (outcome.nodes, outcome.contributors, pos.phase) == (2, 2, m.BOUNDARY)


def test_divisor_taken_after_a_state_sync_that_re_formed():
    """Bug: a node lost during the joiner's state sync re-forms the epoch and the sync succeeds;
    the step must then divide by the nodes of the new epoch, not of the roster before the sync."""
    pos = m.Position(step=5, fresh=False)
    script = Script((m.Roster, [row(1, 5), row(2, 5), row(9, 0, fresh=True)]),
                    (m.Sync, 5),  # node 2 died in the sync; wccl re-formed the epoch and it succeeded
                    (m.Roster, [row(1, 5), row(9, 5)]))
    outcome = settle(pos, 1, script)
    assert script.calls[1] == m.Sync(m.SEND_ONLY, 5, receive=False)
    assert (outcome.nodes, outcome.contributors) == (2, 2)


def test_a_node_readmitted_at_its_boundary_joins_the_all_reduce_with_no_delta():
    """Bug: node 3, declared lost at the step boundary (frozen), is re-admitted by the update of the
    others' all-reduce retry: it is at BOUNDARY, they at REDUCE. It joins their all-reduce sending
    zeros, and is not counted."""
    rows = [row(1, 7, m.REDUCE, True), row(2, 7, m.REDUCE, True), row(3, 7, m.BOUNDARY)]
    pos = m.Position(step=7, phase=m.BOUNDARY, fresh=False)
    outcome = settle(pos, 3, Script((m.Update, None), (m.Roster, rows)), need_update=True)
    assert (pos.phase, pos.has_delta) == (m.REDUCE, False)
    assert (outcome.nodes, outcome.contributors) == (3, 2)
    pos = m.Position(step=7, phase=m.REDUCE, has_delta=True, fresh=False)  # one of the others
    outcome = settle(pos, 1, Script((m.Update, None), (m.Roster, rows)), need_update=True)
    assert (pos.phase, pos.has_delta, outcome.contributors) == (m.REDUCE, True, 2)


def test_a_joiner_waits_for_the_boundary():
    pos = m.Position(step=4, phase=m.BOUNDARY, fresh=False)
    rows = [row(1, 4, pending=1), row(2, 4, pending=1)]
    script = Script((m.Roster, rows), (m.Update, None), (m.Roster, [row(1, 4), row(2, 4), row(5, 0, fresh=True)]),
                    (m.Sync, 4), (m.Roster, [row(1, 4), row(2, 4), row(5, 4)]))
    outcome = settle(pos, 1, script)
    assert (outcome.nodes, outcome.contributors) == (3, 3)


def test_a_stale_node_brought_up_to_date_does_not_force_an_all_reduce():
    """Node 3 was lost in step 6's all-reduce, which the others committed: it comes back at REDUCE of
    step 6 and receives step 7's state; nobody has a pseudo-gradient, so the step is at its boundary."""
    pos = m.Position(step=6, phase=m.REDUCE, has_delta=True, fresh=False)
    script = Script((m.Update, None), (m.Roster, [row(1, 7), row(2, 7), row(3, 6, m.REDUCE, True)]), (m.Sync, 7),
                    (m.Roster, [row(1, 7), row(2, 7), row(3, 7, m.REDUCE, False)]))
    outcome = settle(pos, 3, script, need_update=True)
    assert script.calls[2] == m.Sync(m.RECEIVE_ONLY, 6, receive=True)
    assert (pos.step, pos.phase, pos.has_delta, outcome.contributors) == (7, m.BOUNDARY, False, 3)


def test_a_misfit_is_refused_and_the_others_go_on():
    rows = [row(1, 4), row(2, 4), row(7, 0, fresh=True, fingerprint=OTHER_FP)]
    with pytest.raises(m.Refused, match="configuration"):
        settle(m.Position(), 7, Script((m.Roster, rows)), fingerprint=OTHER_FP)
    pos = m.Position(step=4, fresh=False)
    outcome = settle(pos, 1, Script((m.Roster, rows), (m.Update, None), (m.Roster, rows[:2])))
    assert outcome.nodes == 2


def test_the_synchronous_baseline_refuses_a_newcomer_and_goes_on():
    rows = [row(1, 4), row(2, 4), row(7, 0, fresh=True)]
    with pytest.raises(m.Refused, match="synchronous"):
        settle(m.Position(), 7, Script((m.Roster, rows)), sync_mode=True)
    outcome = settle(m.Position(step=4, fresh=False), 2, Script((m.Roster, rows), (m.Update, None), (m.Roster, rows[:2])),
                     sync_mode=True)
    assert outcome.nodes == 2


def test_fresh_nodes_start_from_the_most_common_state():
    pos = m.Position()
    script = Script((m.Roster, [row(1, 0, fresh=True), row(2, 0, fresh=True)]), (m.Sync, 0),
                    (m.Roster, [row(1, 0), row(2, 0)]))
    settle(pos, 2, script)
    assert script.calls[1] == m.Sync(m.POPULAR, 0, receive=True) and not pos.fresh
