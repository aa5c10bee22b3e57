"""The coordinator daemon of the wheel: ``python -m wccl.coord`` (and the ``wccl-coord`` console
script where pip installed the package), as a user with only the wheel runs it."""

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from conftest import Peer, close_all


def daemon(command, *args):
    """Starts the daemon; returns the process and the port it printed."""
    proc = subprocess.Popen([*command, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    assert line.startswith("wccl-coord listening on port "), (line, proc.stderr.read() if proc.poll() else "")
    return proc, int(line.split()[-1])


def installed_script():
    script = Path(sys.executable).parent / "wccl-coord"
    return [str(script)] if script.exists() else None


COMMANDS = [pytest.param([sys.executable, "-m", "wccl.coord"], id="python -m wccl.coord"),
            pytest.param("script", id="wccl-coord",
                         marks=pytest.mark.skipif(os.environ.get("WCCL_TEST_INSTALLED") != "1" and not installed_script(),
                                                  reason="no pip-installed wccl (scripts/test.sh)"))]


@pytest.mark.parametrize("command", COMMANDS)
def test_daemon_runs_a_group_and_stops_on_sigterm(command, pki):
    command = installed_script() if command == "script" else command
    assert command, "pip install . puts wccl-coord beside the environment's python"
    proc, port = daemon(command, "--listen", "127.0.0.1:0", "--min-peers", "2", "--tls-cert", pki["tls_cert"],
                        "--tls-key", pki["tls_key"], "--tls-ca", pki["tls_ca"], "--log-level", "error")
    try:
        config = {"coordinator": f"127.0.0.1:{port}", "listen": "127.0.0.1:0", "log_level": "error", **pki}
        member = ("import sys, wccl\n"
                  "with wccl.Communicator(**dict(a.split('=', 1) for a in sys.argv[1:])) as c: print(c.size)")
        members = [subprocess.Popen([sys.executable, "-c", member, *[f"{k}={v}" for k, v in config.items()]],
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
        for m in members:  # min-peers 2: the epoch forms with both
            out, err = m.communicate(timeout=60)
            assert m.returncode == 0 and out.split() == ["2"], err
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "stopped by SIGTERM" in err


def test_daemon_names_a_bad_flag():
    bad = subprocess.run([sys.executable, "-m", "wccl.coord", "--listen"], capture_output=True, text=True, timeout=30)
    assert bad.returncode == 2 and 'unexpected argument "--listen"' in bad.stderr
    unknown = subprocess.run([sys.executable, "-m", "wccl.coord", "--no-such-key", "1"], capture_output=True,
                             text=True, timeout=30)
    assert unknown.returncode == 2 and "no_such_key" in unknown.stderr
    usage = subprocess.run([sys.executable, "-m", "wccl.coord", "--help"], capture_output=True, text=True, timeout=30)
    assert usage.returncode == 0 and "--min-peers" in usage.stdout


def read_events(path, until, timeout=30):
    """The events log's lines, once until(events) holds (polled, at most timeout s)."""
    deadline = time.monotonic() + timeout
    while True:
        events = [json.loads(line) for line in open(path)] if path.exists() else []
        if until(events) or time.monotonic() > deadline:
            return events
        time.sleep(0.05)


def update_until_reconnected(peer, timeout=30):
    """The peer's update, repeated while the coordinator cannot be reached; the epoch's size."""
    deadline = time.monotonic() + timeout
    while True:
        peer.request(cmd="update")
        r = peer.reply()
        if r["ok"] or r["error"] != "CoordinatorUnreachableError" or time.monotonic() > deadline:
            assert r["ok"], r
            return r["size"]
        time.sleep(0.1)


def test_the_events_log_tells_a_jobs_history_across_a_restart(pki, tmp_path):
    """wccl-coord --events-log: one JSON line per membership event. Three members join, one is
    SIGKILLed, the survivors update; the coordinator is SIGKILLed and started again on its port
    with the same log; the survivors come back (it adopts their epoch), update and leave."""
    log = tmp_path / "events.jsonl"
    command = [sys.executable, "-m", "wccl.coord"]
    flags = ["--min-peers", "3", "--events-log", str(log), "--tls-cert", pki["tls_cert"], "--tls-key", pki["tls_key"],
             "--tls-ca", pki["tls_ca"], "--log-level", "error"]
    coord, port = daemon(command, "--listen", "127.0.0.1:0", *flags)
    peers = []
    try:
        config = {"coordinator": f"127.0.0.1:{port}", "listen": "127.0.0.1:0", "log_level": "error", **pki}
        peers = [Peer(dict(config, name=f"m{i}")) for i in range(3)]
        for p in peers:
            p.joined = p.reply()
        peers[1].kill()
        survivors = [peers[0], peers[2]]
        for p in survivors:
            p.request(cmd="update")
        assert all(p.reply()["size"] == 2 for p in survivors)
        coord.send_signal(signal.SIGKILL)
        coord.wait(timeout=10)
        coord, _ = daemon(command, "--listen", f"127.0.0.1:{port}", *flags)
        # As a training loop does, each survivor updates again while the coordinator is away.
        with ThreadPoolExecutor(2) as pool:
            assert list(pool.map(update_until_reconnected, survivors)) == [2, 2]
        assert close_all(survivors) == [0, 0]
        events = read_events(log, lambda es: sum(e["event"] == "left" for e in es) == 2)
    finally:
        for p in peers:
            if p.proc.poll() is None:
                p.kill()
        coord.send_signal(signal.SIGTERM)
        coord.communicate(timeout=30)
    said = [(e["event"], e.get("name")) for e in events]
    first, restarted = said.index(("started", None)), said.index(("started", None), 1)
    before, after = said[first + 1:restarted], said[restarted + 1:]
    assert sorted(before[:3]) == [("registered", "m0"), ("registered", "m1"), ("registered", "m2")], said
    assert sorted(before[3:6]) == [("admitted", "m0"), ("admitted", "m1"), ("admitted", "m2")], said
    assert before[6:] == [("epoch", None), ("lost", "m1"), ("revoked", None), ("epoch", None)], said
    lost = events[first + 1 + 7]
    assert lost["cause"] == "disconnected" and lost["member"] and lost["reason"], lost
    formed = [e for e in events if e["event"] == "epoch"]
    assert [(e["members"], e["origin"], e["admitted"], e["lost"]) for e in formed] == [(3, "first", 3, 0), (2, "continues", 0, 1)]
    adopted = events[restarted + 1]
    assert after[0] == ("adopted", adopted["name"]) and adopted["name"] in ("m0", "m2"), said
    assert adopted["epoch"] == formed[1]["epoch"] and adopted["members"] == 2, adopted
    assert sorted(after[1:]) == [("left", "m0"), ("left", "m2")], said
    assert all(e["epoch"] == adopted["epoch"] and e["member"] for e in events[restarted + 2:]), events
