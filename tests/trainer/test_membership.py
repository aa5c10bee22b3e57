"""The trainer's node-level membership rules (examples/diloco/membership.py), without I/O: one node's
settle() fed scripted mesh results, for the faults a real job meets."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples" / "diloco"))
import membership as m  # noqa: E402

FP = m.configuration_fingerprint(local_size=2, dim=96, inner_steps=8, wire="int8")
OTHER_FP = m.configuration_fingerprint(local_size=1, dim=96, inner_steps=8, wire="int8")


def row(node_id, step, phase=m.BOUNDARY, has_delta=False, fresh=False, fingerprint=FP, pending=0, known_step=-1,
        founder=True, missed_start=False, origin=m.CONTINUES, epoch=1):
    return m.Row(node_id, step, phase, has_delta, fresh, fingerprint, known_step, 2 if founder else 0, missed_start,
                 pending, origin, epoch)


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
    pos = m.Position(joined_origin=m.FIRST, founding=2)
    script = Script((m.Roster, [row(1, 0, fresh=True), row(2, 0, fresh=True)]), (m.Sync, 0),
                    (m.Roster, [row(1, 0), row(2, 0)]))
    settle(pos, 2, script)
    assert script.calls[1] == m.Sync(m.POPULAR, 0, receive=True) and not pos.fresh


def test_new_nodes_wait_for_the_state_of_a_job_whose_nodes_were_all_lost():
    """Bugs 8 and 9: every node that held the job's state is away (frozen, cut off); the nodes here
    are new. They must not begin the job again (nor decide its configuration by a majority of
    newcomers): they wait, and the returning node's state wins."""
    pos = m.Position(joined_origin=m.CONTINUES)
    lost = [row(10, 0, fresh=True, founder=False, origin=m.AFTER_LOSS),
            row(11, 0, fresh=True, founder=False, fingerprint=OTHER_FP, origin=m.AFTER_LOSS)]
    back = [row(2, 9), row(10, 0, fresh=True, founder=False, known_step=0),
            row(11, 0, fresh=True, founder=False, fingerprint=OTHER_FP, known_step=0)]
    script = Script((m.Roster, lost), (m.Wait, False), (m.Update, None), (m.Roster, lost), (m.Wait, False),
                    (m.Update, None), (m.Roster, back), (m.Update, None),  # the misfit is refused by node 2's rows
                    (m.Roster, back[:2]), (m.Sync, 9), (m.Roster, [row(2, 9), row(10, 9)]))
    outcome = settle(pos, 10, script)
    assert script.calls[9] == m.Sync(m.RECEIVE_ONLY, 0, receive=True)
    assert (pos.step, pos.fresh, outcome.nodes) == (9, False, 2)
    with pytest.raises(m.Stopped, match="no node holding the job's state"):
        settle(m.Position(), 10, Script((m.Roster, lost), (m.Wait, True)))


def test_a_node_that_saw_a_newer_state_waits_for_it():
    """A node at step 4 saw node 2 at step 6; node 2 was lost (frozen). The nodes here do not go on
    from step 4: they wait for it (or stop)."""
    pos = m.Position(step=4, fresh=False, known_step=6)
    script = Script((m.Roster, [row(1, 4, known_step=6), row(3, 4)]), (m.Wait, False), (m.Update, None),
                    (m.Roster, [row(1, 4, known_step=6), row(2, 6), row(3, 4)]), (m.Sync, 6),
                    (m.Roster, [row(1, 6), row(2, 6), row(3, 6)]))
    outcome = settle(pos, 1, script)
    assert script.calls[4] == m.Sync(m.RECEIVE_ONLY, 4, receive=True)
    assert (pos.step, outcome.nodes) == (6, 3)


def test_the_first_nodes_begin_the_job_and_a_newcomer_among_them_receives():
    """At the job's start, nodes of the group's first epoch begin it (POPULAR); a node admitted at a
    later update of a job not begun yet receives their state. Without a founder, nobody begins."""
    rows = [row(1, 0, fresh=True), row(2, 0, fresh=True, founder=False)]
    founder, newcomer = m.Position(joined_origin=m.FIRST, founding=2), m.Position(joined_origin=m.CONTINUES)
    s1 = Script((m.Roster, rows), (m.Sync, 0), (m.Roster, [row(1, 0), row(2, 0)]))
    s2 = Script((m.Roster, rows), (m.Sync, 0), (m.Roster, [row(1, 0), row(2, 0)]))
    settle(founder, 1, s1)
    settle(newcomer, 2, s2)
    assert s1.calls[1].mode == m.POPULAR and s2.calls[1].mode == m.RECEIVE_ONLY
    alone = [row(2, 0, fresh=True, founder=False)]
    with pytest.raises(m.Stopped):
        settle(m.Position(), 2, Script((m.Roster, alone), (m.Wait, True)))


def test_a_node_of_a_job_that_ended_stops():
    """The job's nodes finished and left while this one was frozen: it must not train the rest alone."""
    rows = [row(1, 7, origin=m.AFTER_LEAVE)]
    with pytest.raises(m.Stopped, match="ended"):
        settle(m.Position(step=7, fresh=False, in_job=True, joined_origin=m.FIRST), 1, Script((m.Roster, rows)))
    # Nodes starting a new job on the same coordinator after the last one left begin it, and go on
    # in that epoch (it stays AFTER_LEAVE while nothing changes) at their next boundary.
    pos = m.Position(joined_origin=m.AFTER_LEAVE, founding=2)
    fresh = [row(5, 0, fresh=True, origin=m.AFTER_LEAVE, epoch=9), row(6, 0, fresh=True, origin=m.AFTER_LEAVE, epoch=9)]
    after = [row(5, 0, origin=m.AFTER_LEAVE, epoch=9), row(6, 0, origin=m.AFTER_LEAVE, epoch=9)]
    script = Script((m.Roster, fresh), (m.Sync, 0), (m.Roster, after))
    settle(pos, 5, script)
    assert script.calls[1].mode == m.POPULAR
    pos.in_job, pos.loop_epoch, pos.step = True, pos.epoch, 1
    boundary = [row(5, 1, origin=m.AFTER_LEAVE, epoch=9), row(6, 1, origin=m.AFTER_LEAVE, epoch=9)]
    assert settle(pos, 5, Script((m.Roster, boundary))).nodes == 2


def test_founders_that_all_missed_the_beginning_begin_it_when_all_are_here():
    """Every founder's first state sync failed (a loss and the coordinator away): nobody began the
    job, so when all of them are here they begin it; with one missing (it may have begun it), they wait."""
    rows = [row(1, 0, fresh=True, missed_start=True), row(2, 0, fresh=True, missed_start=True)]
    pos = m.Position(joined_origin=m.FIRST, founding=2, missed_start=True)
    script = Script((m.Roster, rows), (m.Sync, 0), (m.Roster, [row(1, 0), row(2, 0)]))
    settle(pos, 1, script)
    assert script.calls[1].mode == m.POPULAR
    with pytest.raises(m.Stopped):
        settle(m.Position(joined_origin=m.FIRST, founding=2, missed_start=True), 1,
               Script((m.Roster, rows[:1]), (m.Wait, True)))
