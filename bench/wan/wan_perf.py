#!/usr/bin/env python3
"""wccl-perf on the WAN emulator: one peer per emulated host, the coordinator on the first host.

  wan_perf.py TOPOLOGY [--build DIR] [--tls on|off] [--ping] -- [wccl-perf flags: -b -e -n -w --wire ...]

Brings up tools/wan (root), optionally prints each pair's ping round trip from the first host,
runs wccl-coord and `wccl-perf --coordinator` on every host, prints the first peer's output (its
table, or its JSON with --json), and the forwarder's per-host counters. Exit status: wccl-perf's
(non-zero when a result is wrong). Standard library only.
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tools" / "wan"))
sys.path.insert(0, str(ROOT / "tools" / "devkit"))
from wan import Wan  # noqa: E402
from group import make_pki  # noqa: E402

PORT = 48148


def ping_ms(wan, a, b, count=5):
    """Median round trip from host a to host b, in ms."""
    out = wan.run(a, ["ping", "-n", "-q", "-c", str(count), "-i", "0.2", wan.address(b)],
                  capture_output=True, text=True, timeout=60).stdout
    m = re.search(r"= [\d.]+/([\d.]+)/", out)
    return float(m.group(1)) if m else None


def run(topology, build, tls, perf_args, ping=False, timeout_s=600):
    """Returns (wccl-perf's exit status, the first peer's stdout, the forwarder's counters, pings)."""
    build = Path(build)
    with tempfile.TemporaryDirectory(prefix="wccl-wan-") as tmp:
        wan = Wan(topology, str(build / "tools" / "wccl-wan-forward"), log=Path(tmp) / "forwarder.log")
        with wan:
            hosts = list(wan.hosts)
            pings = {}
            if ping:
                for other in hosts[1:]:
                    pings[(hosts[0], other)] = ping_ms(wan, hosts[0], other)
            env = dict(os.environ, WCCL_TLS="on" if tls else "off", WCCL_LOG_LEVEL="error")
            if tls:
                env.update({"WCCL_" + k: v for k, v in make_pki(Path(tmp)).items()})
            coord_addr = f"{wan.address(hosts[0])}:{PORT}"
            coord = wan.popen(hosts[0], [str(build / "tools" / "wccl-coord"), "--listen", coord_addr,
                                         "--min-peers", str(len(hosts)), "--settle-ms", "100"],
                              env=env, stdout=subprocess.DEVNULL, stderr=open(Path(tmp) / "coord.log", "w"))
            peers = []
            try:
                for k, h in enumerate(hosts):
                    penv = dict(env, WCCL_NAME=h, WCCL_LISTEN=f"{wan.address(h)}:0")
                    peers.append(wan.popen(h, [str(build / "bench" / "perf" / "wccl-perf"), "--coordinator", coord_addr]
                                           + perf_args, env=penv, text=True,
                                           stdout=subprocess.PIPE if k == 0 else subprocess.DEVNULL))
                out = peers[0].communicate(timeout=timeout_s)[0]
                status = max(abs(p.wait(timeout=60)) for p in peers)
            finally:
                for p in peers + [coord]:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
        counters = wan.counters()
    return status, out, counters, pings


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("topology")
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--tls", choices=["on", "off"], default="on")
    parser.add_argument("--ping", action="store_true", help="print each host's round trip from the first")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    perf_args = argv[cut + 1:]
    start = time.monotonic()
    status, out, counters, pings = run(args.topology, args.build, args.tls == "on", perf_args, ping=args.ping)
    for (a, b), ms in pings.items():
        print(f"# ping {a} -> {b}: {ms} ms")
    print(out, end="")
    print(f"# forwarder ({time.monotonic() - start:.0f} s):")
    for host, c in counters.items():
        print(f"#   {host}: " + ", ".join(f"{k} {v}" for k, v in c.items()))
    return status


if __name__ == "__main__":
    sys.exit(main())
