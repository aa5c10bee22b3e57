"""torchft over wccl (wccl.torchft.ProcessGroupWccl): torchft's Manager and LocalSGD, replica groups
in their own processes (examples/torchft_localsgd.py) and torchft's lighthouse in this one. The same job on
torchft's ProcessGroupGloo ends with the same parameters; a replica SIGKILLed mid-run leaves the
other training alone, and its restart heals from it and trains with it again."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchft")
from torchft._torchft import LighthouseServer  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "torchft_localsgd.py"


class Replica:
    def __init__(self, backend, replica, lighthouse, steps, min_replicas, tmp_path, env, pace=0.0, quorum="async",
                 alone_pace=None):
        self.log = open(tmp_path / f"replica{replica}-{backend}-{time.monotonic_ns()}.log", "w")
        self.proc = subprocess.Popen([sys.executable, str(EXAMPLE), "--replica", str(replica), "--lighthouse", lighthouse,
                                      "--syncs", str(steps), "--min-replicas", str(min_replicas), "--backend", backend,
                                      "--timeout", "20", "--quorum", quorum, "--pace", str(pace),
                                      "--alone-pace", str(pace if alone_pace is None else alone_pace)],
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


def test_the_documented_commands_train_two_replicas():
    """docs/python.md's torchft commands, exactly as written (its sh block that runs
    examples/torchft_localsgd.py), from the repository root: torchft's lighthouse and two replica
    groups over wccl in plaintext. Both commit all 6 syncs with 2 participants and end with the same
    parameter bits."""
    text = (ROOT / "docs" / "python.md").read_text()
    blocks = [b for b in re.findall(r"```sh\n(.*?)```", text, re.S) if "examples/torchft_localsgd.py" in b]
    assert len(blocks) == 1, "docs/python.md shows the torchft commands in one sh block"
    if not (ROOT / ".venv" / "bin" / "torchft_lighthouse").exists():
        pytest.skip("the commands need scripts/venv.sh's .venv (torchft_lighthouse)")
    proc = subprocess.Popen(["bash", "-c", blocks[0]], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, start_new_session=True, env=dict(os.environ, WCCL_LOG_LEVEL="error"))
    try:
        out, _ = proc.communicate(timeout=240)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # the lighthouse, if the block did not end it
        except ProcessLookupError:
            pass
    # Both replicas and the lighthouse write to one pipe: their lines may run into each other.
    lines = []
    for text in re.findall(r"\{[^{}]*\}", out):
        try:
            lines.append(json.loads(text))
        except json.JSONDecodeError:
            pass
    for r in (0, 1):
        syncs = [x for x in lines if x.get("replica") == r and "participants" in x]
        assert [x["step"] for x in syncs] == list(range(1, 7)), out[-4000:]
        assert all(x["participants"] == 2 for x in syncs), out[-4000:]
    finals = {x["final"] for x in lines if "final" in x}
    assert len([x for x in lines if "final" in x]) == 2 and len(finals) == 1, out[-4000:]
