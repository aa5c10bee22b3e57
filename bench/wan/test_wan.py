#!/usr/bin/env python3
"""The short WAN test (CI): four emulated hosts, 200 Mbit/s links, 5 ms one way, wccl-perf over
TLS. Asserts what cannot flake: every result exact (INT8: within its bound), no all-reduce faster
than the links allow (a peer's wire bytes per second at most the link rate), none quicker than the delays allow
(at least two one-way delays: the data must cross a link, then DONE and COMMIT cross one each),
the forwarder saw the traffic, and no device dropped a packet before the forwarder read it (only
the topology's queues drop). Then the small validation of wccl-sim (docs/sim.md): the same
topology and cases simulated, printed next to the measurement, and the one bound that cannot
flake asserted: the simulation is no slower than the emulator by more than half (a loaded machine
only slows the emulator). Last, a Wan whose owner is SIGKILLed (no teardown runs) takes its
forwarder with it. Skips (77) without root or /dev/net/tun.

  test_wan.py BUILD_DIR
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import wan_perf  # noqa: E402

RATE_BPS = 200e6
ONE_WAY_S = 0.005
TOPOLOGY = """
host h0 region=x up=200mbit
host h1 region=x up=200mbit
host h2 region=x up=200mbit
host h3 region=x up=200mbit
delay x x 5ms
queue 1M
"""


def main():
    if os.geteuid() != 0 or not os.path.exists("/dev/net/tun") or shutil.which("ip") is None:
        print("skipped: needs root, /dev/net/tun and ip (iproute2)")
        return 77
    with tempfile.NamedTemporaryFile("w", suffix=".wan") as topo:
        topo.write(TOPOLOGY)
        topo.flush()
        status, out, counters, _, _ = wan_perf.run(topo.name, sys.argv[1], True,
                                                   ["-b", "4K", "-e", "4M", "-f", "32", "-n", "2", "-w", "1",
                                                    "--wire", "native,int8", "--json"], timeout_s=240)
    print(out)
    assert status == 0, f"wccl-perf failed ({status})"
    rows = json.loads(out)["results"]
    assert len(rows) == 6, rows
    for r in rows:
        assert r["wrong"] == 0, r
        assert r["wire_bytes"] * 8 / (r["time_us"] * 1e-6) <= RATE_BPS, f"faster than the links: {r}"
        assert r["time_us"] >= 2 * ONE_WAY_S * 1e6, f"quicker than the delays: {r}"
    for host, c in counters.items():
        assert c["delivered(B)"] > 2 * 4 * 2**20, f"{host} received too little: {c}"
        assert c["dev-drop"] == 0, f"{host}'s device dropped packets the topology did not: {c}"
    print("size wire algo emulator(ms) wccl-sim(ms) sim/emulator")
    with tempfile.NamedTemporaryFile("w", suffix=".wan") as topo:
        topo.write(TOPOLOGY)
        topo.flush()
        for r in rows:
            sim = subprocess.run([str(Path(sys.argv[1]) / "tools" / "wccl-sim"), topo.name, "-b", str(r["bytes"]),
                                  "--wire", r["wire"], "--algo", r["algo"], "-n", "2", "-w", "1", "--json"],
                                 capture_output=True, text=True, check=True, timeout=120).stdout
            simulated = json.loads(sim)["rows"][0]["seconds"] * 1e6
            ratio = simulated / r["time_us"]
            print(f"{r['bytes']} {r['wire']} {r['algo']} {r['time_us'] / 1e3:.2f} {simulated / 1e3:.2f} {ratio:.2f}")
            assert ratio <= 1.5, f"the simulation is slower than the emulator: {r}, {simulated} us"
    forwarder_ends_with_its_owner(Path(sys.argv[1]))
    print("ok")
    return 0


def forwarder_ends_with_its_owner(build):
    tools = Path(__file__).resolve().parents[2] / "tools" / "wan"

    def running(pid):  # not ended (a zombie has ended); gone once reaped
        try:
            return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[:1] != ["Z"]
        except OSError:
            return False

    with tempfile.TemporaryDirectory() as tmp:
        topo = Path(tmp) / "t.wan"
        topo.write_text(TOPOLOGY)
        log = Path(tmp) / "f.log"
        owner = subprocess.Popen(
            [sys.executable, "-c",
             f"import sys, time; sys.path.insert(0, {str(tools)!r}); from wan import Wan; "
             f"w = Wan({str(topo)!r}, {str(build / 'tools' / 'wccl-wan-forward')!r}, log={str(log)!r}).up(); "
             "print(w.proc.pid, flush=True); time.sleep(300)"],
            stdout=subprocess.PIPE, text=True)
        try:
            line = owner.stdout.readline()
            assert line.strip().isdigit(), f"the emulation did not come up: {log.read_text() if log.exists() else ''}"
            forwarder = int(line)
            owner.kill()
            owner.wait()
            deadline = time.monotonic() + 10
            while running(forwarder) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert not running(forwarder), "the forwarder outlived the process that started it"
        finally:
            owner.kill()
            owner.wait()
            for host in ("h0", "h1", "h2", "h3"):  # the killed owner's namespaces (its teardown never ran)
                subprocess.run(["ip", "netns", "del", "wccl-" + host], stderr=subprocess.DEVNULL, check=False)
        print("forwarder ended with its owner")


if __name__ == "__main__":
    sys.exit(main())
