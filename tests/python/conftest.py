"""Fixtures for the wccl Python suite: a job's certificates, a TLS coordinator, and peers in their own
processes (peer.py) driven over stdin/stdout with a timeout on every reply."""

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

import wccl

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "devkit"))
from group import make_pki  # noqa: E402

REPLY_TIMEOUT = 60.0


@pytest.fixture(scope="session")
def pki(tmp_path_factory):
    """A CA and one node certificate (EC P-256) made with the openssl CLI, as docs/tls.md does."""
    return {k.lower(): v for k, v in make_pki(tmp_path_factory.mktemp("pki")).items()}


@pytest.fixture
def coordinators(pki):
    """coordinators(**config) starts a TLS coordinator on 127.0.0.1 (stopped after the test)."""
    started = []

    def start(**config):
        started.append(wccl.Coordinator(listen="127.0.0.1:0", **pki, **config))
        return started[-1]

    yield start
    for coord in started:
        coord.stop()


def member_config(coord, pki):
    """Configuration keys for a member of coord's group."""
    return {"coordinator": f"127.0.0.1:{coord.port}", "listen": "127.0.0.1:0", "log_level": "error", **pki}


class Peer:
    """peer.py in its own process. ``request(cmd)`` sends one command; ``reply()`` waits for its answer."""

    def __init__(self, config):
        env = dict(os.environ)
        env.update({f"WCCL_{k.upper()}": str(v) for k, v in config.items()})
        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).with_name("peer.py"))], env=env,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._lines = queue.Queue(maxsize=16)
        threading.Thread(target=self._read, daemon=True).start()
        self.joined = None
        self.killed = False

    def _read(self):
        for line in self.proc.stdout:
            self._lines.put(line)
        self._lines.put(None)

    def request(self, **cmd):
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()

    def reply(self):
        try:
            line = self._lines.get(timeout=REPLY_TIMEOUT)
        except queue.Empty:
            raise AssertionError(f"peer {self.proc.pid}: no reply in {REPLY_TIMEOUT} s") from None
        assert line is not None, f"peer {self.proc.pid} exited with {self.proc.wait(timeout=10)}"
        return json.loads(line)

    def kill(self):
        self.killed = True
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def end_input(self):
        """The peer leaves the group gracefully and exits."""
        if self.proc.poll() is None:
            self.proc.stdin.close()

    def wait(self, timeout=30):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"peer {self.proc.pid} did not exit in {timeout} s after its input ended") from None


def close_all(peers):
    """Ends every peer's input at once (a graceful leave is a collective step), then waits for all."""
    for p in peers:
        p.end_input()
    return [p.wait() for p in peers]


@pytest.fixture
def spawn(coordinators, pki):
    """spawn(n) starts a coordinator whose first epoch waits for n members and n peers, and returns
    the peers in rank order once they have joined it."""
    peers = []

    def start(n):
        coord = coordinators(min_peers=n)
        group = [Peer(member_config(coord, pki)) for _ in range(n)]
        peers.extend(group)
        for p in group:
            p.joined = p.reply()
        assert [p.joined["size"] for p in group] == [n] * n
        return sorted(group, key=lambda p: p.joined["rank"])

    yield start
    codes = close_all(peers)
    assert all(code == 0 for p, code in zip(peers, codes) if not p.killed), f"a peer failed to leave: {codes}"


@pytest.fixture
def members(coordinators, pki):
    """members(n, fn): runs fn(comm) on n in-process members of one epoch, on threads; returns the
    results by rank, or raises the first member's exception."""

    def run(n, fn):
        coord = coordinators(min_peers=n)
        config = {"coordinator": f"127.0.0.1:{coord.port}", "listen": "127.0.0.1:0", "log_level": "error", **pki}
        results, errors = {}, []

        def member():
            try:
                with wccl.Communicator(**config) as comm:
                    assert comm.size == n
                    results[comm.rank] = fn(comm)
            except BaseException as e:  # re-raised on the test's thread
                errors.append(e)

        threads = [threading.Thread(target=member) for _ in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=120)
        assert not any(t.is_alive() for t in threads), "a member hung"
        if errors:
            raise errors[0]
        return [results[r] for r in range(n)]

    return run
