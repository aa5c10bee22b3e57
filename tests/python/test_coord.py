"""The coordinator daemon of the wheel: ``python -m wccl.coord`` (and the ``wccl-coord`` console
script where pip installed the package), as a user with only the wheel runs it."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
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
        stop_all(peers, coord)
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


def http_get(port, path, headers=None):
    """GET http://127.0.0.1:port/path; returns (status, content type, body)."""
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    try:
        with urllib.request.urlopen(request, timeout=10) as r:
            return r.status, r.headers["Content-Type"], r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers["Content-Type"], e.read().decode()


def raw_exchange(port, data):
    """Sends bytes on a fresh connection; returns all it reads until the server closes it."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        answer = b""
        while chunk := s.recv(65536):
            answer += chunk
    return answer


def raw_http(port, data):
    """raw_exchange's status line's code (0: closed without one)."""
    answer = raw_exchange(port, data)
    return int(answer.split()[1]) if answer.startswith(b"HTTP/1.1 ") else 0


def stop_all(peers, coord):
    """SIGKILLs the peers still running, then stops the daemon with SIGTERM."""
    for p in peers:
        if p.proc.poll() is None:
            p.kill()
    coord.send_signal(signal.SIGTERM)
    coord.communicate(timeout=30)


def metrics(port):
    """The /metrics samples as {(name, frozenset(labels)): value}, parsed by prometheus_client."""
    from prometheus_client.parser import text_string_to_metric_families
    status, kind, body = http_get(port, "/metrics")
    assert status == 200 and kind.startswith("text/plain; version=0.0.4"), (status, kind)
    return {(s.name, frozenset(s.labels.items())): s.value
            for family in text_string_to_metric_families(body) for s in family.samples}


def sample(m, name, **labels):
    return m.get((name, frozenset(dict(group="default", **labels).items())))


def wait_metrics(port, until, timeout=20):
    deadline = time.monotonic() + timeout
    while True:
        m = metrics(port)
        if until(m) or time.monotonic() > deadline:
            return m
        time.sleep(0.1)


def http_daemon(*flags):
    proc, port = daemon([sys.executable, "-m", "wccl.coord"], "--listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
                        *flags)
    line = proc.stdout.readline()
    assert line.startswith("wccl-coord serving http on port "), line
    return proc, port, int(line.split()[-1])


def test_the_coordinator_serves_metrics_and_status_over_http(pki):
    """wccl-coord --http: /metrics parsed by prometheus_client moves as members commit operations,
    one is SIGKILLed and one joins; /status.json tells the same; /status is a page; bad requests get
    their error and a flood of idle connections does not hold up the group."""
    pytest.importorskip("prometheus_client")
    proc, port, http = http_daemon("--min-peers", "3", "--tls-cert", pki["tls_cert"], "--tls-key", pki["tls_key"],
                                   "--tls-ca", pki["tls_ca"], "--log-level", "error")
    peers = []
    try:
        m = metrics(http)
        assert m[("wccl_coord_start_time_seconds", frozenset())] <= time.time()
        config = {"coordinator": f"127.0.0.1:{port}", "listen": "127.0.0.1:0", "log_level": "error", **pki}
        peers = [Peer(dict(config, name=f"m{i}")) for i in range(3)]
        for p in peers:
            p.joined = p.reply()
        for p in peers:
            p.request(cmd="allreduce", lib="numpy", dtype="float32", count=1000, op="SUM")
        assert all(p.reply()["ok"] for p in peers)
        m = wait_metrics(http, lambda m: sample(m, "wccl_group_operations_committed_total") == 1)
        assert sample(m, "wccl_group_members") == 3 and sample(m, "wccl_group_joiners") == 0
        assert sample(m, "wccl_group_operations_committed_total") == 1
        assert sample(m, "wccl_group_epoch") == peers[0].joined["epoch"]
        assert sample(m, "wccl_group_epoch_changes_total", cause="first") == 1
        assert sorted(labels["member"] for (name, labels_set) in m for labels in [dict(labels_set)]
                      if name == "wccl_member_info") == ["m0", "m1", "m2"]

        peers[1].kill()
        survivors = [peers[0], peers[2]]
        for p in survivors:
            p.request(cmd="update")
        assert all(p.reply()["size"] == 2 for p in survivors)
        m = wait_metrics(http, lambda m: sample(m, "wccl_group_members") == 2)
        assert sample(m, "wccl_group_lost_total", cause="disconnected") == 1
        assert sample(m, "wccl_group_epoch_changes_total", cause="disconnected") == 1
        assert sample(m, "wccl_group_revocations_total") == 1
        assert sample(m, "wccl_group_epochs_total") == 2

        # A flood of idle HTTP connections while a member joins and the group admits it.
        flood = [socket.create_connection(("127.0.0.1", http), timeout=10) for _ in range(200)]
        try:
            joiner = Peer(dict(config, name="m3"))
            peers.append(joiner)
            deadline = time.monotonic() + 30
            while True:
                survivors[0].request(cmd="pending")
                if survivors[0].reply()["pending"] == 1 or time.monotonic() > deadline:
                    break
                time.sleep(0.1)
            for p in survivors:
                p.request(cmd="update")
            assert all(p.reply()["size"] == 3 for p in survivors)
            assert joiner.reply()["size"] == 3
        finally:
            for s in flood:
                s.close()
        m = wait_metrics(http, lambda m: sample(m, "wccl_group_members") == 3)
        assert sample(m, "wccl_group_admitted_total") == 4 and sample(m, "wccl_group_registered_total") == 4
        assert sample(m, "wccl_group_epoch_changes_total", cause="join") == 1

        status, kind, body = http_get(http, "/status.json")
        assert status == 200 and kind == "application/json"
        s = json.loads(body)
        (group,) = s["groups"]
        assert group["name"] == "default" and [p["name"] for p in group["members"]] == ["m0", "m2", "m3"]
        assert group["counters"]["lost"]["disconnected"] == 1 and group["counters"]["operations_committed"] == 1
        lost = [e for e in s["events"] if e["event"] == "lost"]
        assert [(e["name"], e["cause"]) for e in lost] == [("m1", "disconnected")]
        status, kind, body = http_get(http, "/status")
        assert status == 200 and kind.startswith("text/html") and "status.json" in body

        assert http_get(http, "/nothing")[0] == 404
        assert raw_http(http, b"GARBAGE\r\n\r\n") == 400
        assert raw_http(http, b"POST /metrics HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello") == 405
        assert raw_http(http, b"GET /metrics HTTP/1.1\r\nX: " + b"a" * 10000 + b"\r\n\r\n") == 431
        assert raw_http(http, b"GET /metrics HTTP/2.0\r\n\r\n") == 505
        answer = raw_exchange(http, b"HEAD /metrics HTTP/1.1\r\n\r\n")
        assert answer.startswith(b"HTTP/1.1 200 ") and answer.endswith(b"\r\n\r\n"), answer[:200]
        assert metrics(http)  # still serving
        assert close_all(peers[:1] + peers[2:]) == [0, 0, 0]
    finally:
        stop_all(peers, proc)
    assert proc.returncode == 0


def test_the_coordinators_http_token(tmp_path):
    """--http-token-file: a request without the token gets 401, with it (header or query) 200; a
    missing file is refused at start."""
    token = tmp_path / "token"
    token.write_text("s3cret-token\n")
    proc, _, http = http_daemon("--tls", "off", "--http-token-file", str(token), "--log-level", "error")
    try:
        status, _, body = http_get(http, "/metrics")
        assert status == 401 and "bearer token" in body
        assert http_get(http, "/metrics", {"Authorization": "Bearer wrong"})[0] == 401
        assert http_get(http, "/metrics", {"Authorization": "Bearer s3cret-token"})[0] == 200
        assert http_get(http, "/status.json?token=s3cret-token")[0] == 200
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=30)
    missing = subprocess.run([sys.executable, "-m", "wccl.coord", "--listen", "127.0.0.1:0", "--http", "0", "--tls",
                              "off", "--http-token-file", str(tmp_path / "none")], capture_output=True, text=True,
                             timeout=60)
    assert missing.returncode == 2 and "http_token_file" in missing.stderr, missing.stderr
