#!/usr/bin/env python3
"""The all-reduce benchmark on the WAN emulator: one peer per emulated host.

  wan_perf.py TOPOLOGY [--build DIR] [--tool T] [--tls on|off] [--ping] [--sysctl KEY=VALUE ...]
              -- [flags of the tool]

Brings up tools/wan (root), optionally prints each pair's ping round trip from the first host,
then runs the tool on every host and prints rank 0's output (its table, or its JSON with
--json) and the forwarder's per-host counters. Tools: wccl (wccl-coord on the first host and
`wccl-perf --coordinator` on each; flags -b -e -n -w --wire ...), gloo-ring_chunked and
gloo-halving_doubling (`gloo-allreduce --rank`, meeting in a file store; the common flags -b -e -f
-n -w -c --json only; plaintext). All measure as bench/perf/sweep.h says. Exit status: the
tool's (non-zero when a result is wrong). Standard library only.
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


def start_wccl(wan, build, tls, perf_args, tmp):
    """wccl-coord on the first host, then wccl-perf on each, named after its host (the first ring
    is in the natural order of the names); the coordinator is the last process."""
    hosts = list(wan.hosts)
    env = dict(os.environ, WCCL_TLS="on" if tls else "off", WCCL_LOG_LEVEL="error")
    if tls:
        env.update({"WCCL_" + k: v for k, v in make_pki(tmp).items()})
    coord_addr = f"{wan.address(hosts[0])}:{PORT}"
    coord = wan.popen(hosts[0], [str(build / "tools" / "wccl-coord"), "--listen", coord_addr,
                                 "--min-peers", str(len(hosts)), "--settle-ms", "100"],
                      env=dict(env, WCCL_LOG_LEVEL="info"), stdout=subprocess.DEVNULL,
                      stderr=open(tmp / "coord.log", "w"))
    peers = []
    for h in hosts:
        peers.append(wan.popen(h, [str(build / "bench" / "perf" / "wccl-perf"), "--coordinator", coord_addr] + perf_args,
                               env=dict(env, WCCL_NAME=h, WCCL_LISTEN=f"{wan.address(h)}:0"),
                               stdout=open(tmp / f"{h}.out", "w")))
    return peers + [coord]


def start_gloo(wan, build, algo, perf_args, tmp, timeout_s):
    """gloo-allreduce as rank k on host k, meeting in a file store."""
    hosts = list(wan.hosts)
    store = tmp / "store"
    store.mkdir()
    return [wan.popen(h, [str(build / "bench" / "compare" / "gloo-allreduce"), "--rank", str(k), "--size",
                          str(len(hosts)), "--store", str(store), "--host", wan.address(h), "--algo", algo,
                          "--timeout-s", str(timeout_s)] + perf_args,
                      stdout=open(tmp / f"{h}.out", "w"))
            for k, h in enumerate(hosts)]


def run(topology, build, tls, perf_args, ping=False, timeout_s=600, tool="wccl", sysctls=()):
    """Returns (the tool's exit status, rank 0's output, the forwarder's counters, pings, the
    coordinator's log lines of the rings it formed)."""
    build = Path(build)
    with tempfile.TemporaryDirectory(prefix="wccl-wan-") as tmpdir:
        tmp = Path(tmpdir)
        wan = Wan(topology, str(build / "tools" / "wccl-wan-forward"), log=tmp / "forwarder.log", sysctls=sysctls)
        with wan:
            hosts = list(wan.hosts)
            pings = {}
            if ping:
                for other in hosts[1:]:
                    pings[(hosts[0], other)] = ping_ms(wan, hosts[0], other)
            procs = []
            rings = []
            try:
                if tool == "wccl":
                    procs = start_wccl(wan, build, tls, perf_args, tmp)
                    peers = procs[:-1]
                else:
                    procs = peers = start_gloo(wan, build, tool[len("gloo-"):], perf_args, tmp, timeout_s)
                deadline = time.monotonic() + timeout_s
                status = max(abs(p.wait(timeout=max(1, deadline - time.monotonic()))) for p in peers)
                # Rank 0 prints; which host it is on depends on the order of arrival.
                out = "".join((tmp / f"{h}.out").read_text() for h in hosts)
                if tool == "wccl":  # the rings the coordinator formed, with their measured round trips
                    rings = [line.split(" info ", 1)[-1].strip()
                             for line in (tmp / "coord.log").read_text().splitlines() if "ring:" in line]
            finally:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
                        p.wait()
        counters = wan.counters()
    return status, out, counters, pings, rings


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("topology")
    parser.add_argument("--build", default=str(ROOT / "build"))
    parser.add_argument("--tool", choices=["wccl", "gloo-ring_chunked", "gloo-halving_doubling"], default="wccl")
    parser.add_argument("--tls", choices=["on", "off"], default="on", help="wccl only (Gloo is plaintext)")
    parser.add_argument("--ping", action="store_true", help="print each host's round trip from the first")
    parser.add_argument("--sysctl", action="append", default=[], metavar="KEY=VALUE",
                        help="a kernel setting for every host's namespace (repeatable)")
    argv = sys.argv[1:]
    cut = argv.index("--") if "--" in argv else len(argv)
    args = parser.parse_args(argv[:cut])
    perf_args = argv[cut + 1:]
    start = time.monotonic()
    status, out, counters, pings, rings = run(args.topology, args.build, args.tls == "on", perf_args, ping=args.ping,
                                       tool=args.tool, sysctls=args.sysctl)
    for (a, b), ms in pings.items():
        print(f"# ping {a} -> {b}: {ms} ms")
    print(out, end="")
    for line in rings:
        print(f"# coordinator: {line}")
    print(f"# forwarder ({time.monotonic() - start:.0f} s):")
    for host, c in counters.items():
        print(f"#   {host}: " + ", ".join(f"{k} {v}" for k, v in c.items()))
    return status


if __name__ == "__main__":
    sys.exit(main())
