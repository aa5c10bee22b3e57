"""The coordinator daemon of the wheel: ``python -m wccl.coord`` (and the ``wccl-coord`` console
script where pip installed the package), as a user with only the wheel runs it."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest


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
