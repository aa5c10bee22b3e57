"""wccl.torch.ElasticDeviceMesh against a coordinator that is SIGKILLed and restarted on its port
(``python -m wccl.coord`` in its own process), in a node of one local rank (a gloo group of one)."""

import os
import sys
import threading
import time

import pytest

import wccl

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
from group import start_coordinator  # noqa: E402 (tools/devkit, on the path from conftest.py)
from wccl.torch import ElasticDeviceMesh  # noqa: E402


class CoordinatorProcess:
    """python -m wccl.coord on a fixed port, killed and started again as an operator's restart would."""

    def __init__(self, log):
        self.cmd = [sys.executable, "-m", "wccl.coord", "--tls", "off", "--log-level", "info"]
        self.log = log
        self.proc, self.port = start_coordinator(self.cmd, os.environ, log)

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def start(self):
        self.proc, _ = start_coordinator(self.cmd, os.environ, self.log, self.port)

    def stop(self):
        if self.proc.poll() is None:
            self.kill()


@pytest.fixture
def node_group(tmp_path):
    """torch.distributed over this process alone: a node of one local rank."""
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_joiner_survives_a_coordinator_restart_while_it_waits(node_group, tmp_path):
    """The mesh's join waits for the members' next update; the coordinator is SIGKILLed meanwhile
    and restarted 0.5 s later. The join used to fail at once (COORDINATOR_UNREACHABLE) and the node
    stopped; later it joined again, but when its JOIN reached the restarted coordinator before the
    job's member came back, it was admitted to an epoch of its own (a group of one). The joiner now
    reconnects naming the epoch it waits to enter, the new coordinator waits for the job, and the
    member's next update admits it."""
    coord = CoordinatorProcess(tmp_path / "coord.log")
    config = {"coordinator": f"127.0.0.1:{coord.port}", "listen": "127.0.0.1:0", "tls": "off", "log_level": "error"}
    try:
        # The job: one member, in epoch 1. It beats (and reconnects) every 2 s, the joiner every
        # 0.1 s: the joiner reaches the restarted coordinator first, the case that once admitted it
        # to an epoch of its own.
        member = wccl.Communicator(group="g0", **config, heartbeat_ms="2000")
        meshes, errors = [], []

        def join():
            try:
                meshes.append(ElasticDeviceMesh(group_prefix="g", coordinator_grace=30, **config, heartbeat_ms="100"))
            except BaseException as e:  # reported below
                errors.append(e)

        joiner = threading.Thread(target=join)
        joiner.start()
        deadline = time.monotonic() + 30
        while member.pending == 0:  # the joiner is registered and waits for an update
            assert time.monotonic() < deadline and not errors, errors
            time.sleep(0.05)
        coord.kill()
        time.sleep(0.5)
        coord.start()
        while joiner.is_alive():  # the member updates, as a trainer does every outer step, until the joiner is in
            assert time.monotonic() < deadline
            try:
                member.update()
            except wccl.CoordinatorUnreachableError:  # not back with the restarted coordinator yet
                pass
            joiner.join(timeout=0.2)
        assert not errors, errors
        assert meshes and meshes[0].comm.size == 2 and member.size == 2
        out = torch.empty(2, dtype=torch.float32)
        done = []
        t = threading.Thread(target=lambda: done.append(member.allreduce(torch.ones(2))))
        t.start()
        assert meshes[0].allreduce(torch.full((2,), 2.0), out, wire=wccl.Wire.NATIVE) is not None
        t.join(timeout=30)
        assert out.tolist() == [3.0, 3.0]
        meshes[0].close()
        member.close()
    finally:
        coord.stop()


def test_a_node_nobody_admits_stops_after_admit_timeout(node_group, tmp_path):
    """A job of one member that never updates again (as when it has finished): a node joining it
    waits, and raises MembershipError once admit_timeout passes, instead of joining again for ever."""
    coord = CoordinatorProcess(tmp_path / "coord.log")
    config = {"coordinator": f"127.0.0.1:{coord.port}", "listen": "127.0.0.1:0", "tls": "off", "log_level": "error",
              "join_timeout_ms": "1000"}
    try:
        with wccl.Communicator(group="g0", **config):
            start = time.monotonic()
            with pytest.raises(wccl.torch.MembershipError, match="not admitted .* within 3 s"):
                ElasticDeviceMesh(group_prefix="g", admit_timeout=3, **config)
            assert 3 <= time.monotonic() - start < 10
    finally:
        coord.stop()


def test_a_started_allreduce_runs_while_the_caller_works_and_fails_softly(node_group, tmp_path):
    """allreduce_start (streaming DiLoCo's overlap) returns before the other member has even
    started; wait() then returns the committed stats. A second one, whose peer closes before it
    takes part, makes wait() return None (update and retry), and its cost is counted as uncommitted."""
    coord = CoordinatorProcess(tmp_path / "coord.log")
    config = {"coordinator": f"127.0.0.1:{coord.port}", "listen": "127.0.0.1:0", "tls": "off", "log_level": "error"}
    try:
        member = wccl.Communicator(group="g0", **config)
        meshes = []
        joiner = threading.Thread(target=lambda: meshes.append(ElasticDeviceMesh(group_prefix="g", **config)))
        joiner.start()
        deadline = time.monotonic() + 30
        while not meshes:
            assert time.monotonic() < deadline
            if member.pending:
                member.update()
            time.sleep(0.05)
        joiner.join()
        mesh = meshes[0]
        send, out = torch.full((1000,), 2.0), torch.zeros(1000)
        pending = mesh.allreduce_start(send, out, wire=wccl.Wire.NATIVE)
        time.sleep(0.2)  # the caller's work: the other member has not started yet
        assert not pending.done() and out.sum() == 0
        member.allreduce(torch.ones(1000))
        stats = pending.wait()
        assert stats is not None and stats.world_size == 2 and out.tolist() == [3.0] * 1000
        assert mesh.uncommitted_bytes_sent == 0

        pending = mesh.allreduce_start(send, out, wire=wccl.Wire.NATIVE)
        member.close()
        assert pending.wait() is None and out.tolist() == [3.0] * 1000  # as it was
        mesh.close()
    finally:
        coord.stop()


def test_how_a_membership_call_stands():
    """_call_state: a timed-out update leaves its rank a member waiting at the barrier (DUE: it
    updates again), not out like a timed-out join (TIMEOUT: it joins again); a call read as not
    done at the poll is WAITING even if it has ended since."""
    import wccl.torch as a

    class Call:
        def __init__(self, error=None):
            self.error = error

    class Comm:
        def __init__(self, due):
            self.update_due = due

    mesh = ElasticDeviceMesh.__new__(ElasticDeviceMesh)  # no node: _call_state reads only comm
    for comm, call, done, expected in [
        (None, None, False, a.OUT),
        (Comm(False), Call(), False, a.WAITING),
        (None, Call(RuntimeError("refused")), True, a.FAILED),
        (None, Call(_timeout_error()), True, a.TIMEOUT),                   # a join that timed out
        (Comm(False), Call(_timeout_error()), True, a.DUE),                # an update that timed out
        (Comm(True), Call(), True, a.DUE),
        (Comm(False), Call(), True, a.ADMITTED),
    ]:
        mesh.comm = comm
        assert mesh._call_state(call, done) == expected, (comm, call, done)


def _timeout_error():
    from wccl._lib import TimeoutError as WcclTimeoutError
    return WcclTimeoutError.__new__(WcclTimeoutError)
