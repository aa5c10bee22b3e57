"""torchft over wccl (wccl.torchft.ProcessGroupWccl): torchft's Manager and LocalSGD, replica groups
in their own processes (torchft_worker.py) and torchft's lighthouse in this one. The same job on
torchft's ProcessGroupGloo ends with the same parameters; a replica SIGKILLed mid-run leaves the
other training alone, and its restart heals from it and trains with it again."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchft")
from torchft._torchft import LighthouseServer  # noqa: E402

WORKER = Path(__file__).with_name("torchft_worker.py")


class Replica:
    def __init__(self, backend, replica, lighthouse, steps, min_replicas, tmp_path, env, pace=0.0, quorum="async",
                 alone_pace=None):
        self.log = open(tmp_path / f"replica{replica}-{backend}-{time.monotonic_ns()}.log", "w")
        self.proc = subprocess.Popen([sys.executable, str(WORKER), backend, str(replica), lighthouse, str(steps),
                                      str(min_replicas), str(pace), quorum, str(pace if alone_pace is None else alone_pace)],
                                     env=dict(os.environ, WCCL_LOG_LEVEL="error", **env), stdout=subprocess.PIPE,
                                     stderr=self.log, text=True)
        self.lines = []

    def until(self, pred, timeout=90.0):
        """Reads JSON lines until pred(line) holds; returns that line."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.proc.stdout.readline()
            if not text:
                break
            if text.startswith("{"):
                self.lines.append(json.loads(text))
                if pred(self.lines[-1]):
                    return self.lines[-1]
        self.log.flush()
        raise AssertionError(f"no such line (exit {self.proc.poll()}): {self.lines[-5:]} "
                             f"{Path(self.log.name).read_text()[-3000:]}")

    def finish(self):
        final = self.until(lambda x: "final" in x)
        code = self.proc.wait(60)
        self.log.flush()
        assert code == 0, f"exit {code}: {Path(self.log.name).read_text()[-6000:]}"
        return final

    def kill(self):
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def job(tmp_path):
    state = {"replicas": [], "lighthouse": None}

    def start_lighthouse(min_replicas):
        state["lighthouse"] = LighthouseServer(bind="[::]:0", min_replicas=min_replicas, join_timeout_ms=1000)
        return state["lighthouse"].address()

    def replica(*args, **kwargs):
        state["replicas"].append(Replica(*args, tmp_path=tmp_path, **kwargs))
        return state["replicas"][-1]

    yield start_lighthouse, replica
    for r in state["replicas"]:
        r.kill()
    if state["lighthouse"] is not None:
        state["lighthouse"].shutdown()


def test_localsgd_over_wccl_ends_where_gloo_does(job, pki):
    """Two replica groups, LocalSGD syncing every two steps for 6 syncs, over TLS, the quorum taken
    at each step's start (so that both replicas are in every sync, however loaded the machine):
    every sync has both participants, and the final parameters are the same bits as on torchft's
    gloo group. A replica that failed a commit here once showed a Work whose wait() returned before
    its future completed (torchft's callback chain then asserts)."""
    start_lighthouse, replica = job
    finals = {}
    for backend in ("gloo", "wccl"):
        lighthouse = start_lighthouse(2)
        env = {f"WCCL_{k.upper()}": v for k, v in pki.items()}
        rs = [replica(backend, r, lighthouse, 6, 2, env=env, quorum="sync") for r in range(2)]
        finals[backend] = [r.finish() for r in rs]
        for r in rs:
            syncs = [x for x in r.lines if "participants" in x]
            assert [x["step"] for x in syncs] == list(range(1, 7)) and all(x["participants"] == 2 for x in syncs)
    hashes = {f["final"] for fs in finals.values() for f in fs}
    assert len(hashes) == 1, finals


def test_a_killed_replica_restarts_heals_and_trains_again(job, pki):
    """Two replicas, min_replicas 1: replica 1 is SIGKILLed after its third sync; replica 0 syncs
    alone (one participant), replica 1 is started again, heals from replica 0 (torchft's checkpoint
    transport) and both sync together to the end, with the same final parameters. Alone, replica 0
    paces its steps at 0.5 s, so the restart (a Python process importing torch, on a loaded CI
    machine) finds it still running: at 0.05 s it once finished the job before the restart joined."""
    start_lighthouse, replica = job
    lighthouse = start_lighthouse(1)
    env = {f"WCCL_{k.upper()}": v for k, v in pki.items()}
    steps = 40
    r0 = replica("wccl", 0, lighthouse, steps, 1, env=env, pace=0.05, alone_pace=0.5)
    r1 = replica("wccl", 1, lighthouse, steps, 1, env=env, pace=0.05)
    r1.until(lambda x: x.get("step", 0) >= 3 and x.get("participants") == 2)
    r1.proc.send_signal(signal.SIGKILL)
    r1.proc.wait()
    alone = r0.until(lambda x: x.get("participants") == 1, timeout=60)
    assert alone["step"] < steps - 10, "the restart needs steps left to join"
    r1b = replica("wccl", 1, lighthouse, steps, 1, env=env, pace=0.05)
    together = r1b.until(lambda x: x.get("participants") == 2, timeout=60)
    assert together["step"] > alone["step"], "the restarted replica healed to the job's step"
    f0, f1 = r0.finish(), r1b.finish()
    assert f0["step"] == f1["step"] == steps
    assert f0["final"] == f1["final"]
