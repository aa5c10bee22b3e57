#!/usr/bin/env python3
"""wccl at internet scale, on paper (docs/sim.md "Scale"): wccl-sim runs a 1 GiB INT8 all-reduce
over N peers spread evenly over four regions (1 Gbit/s each, public inter-region round trips),
with the flat ring wccl runs today (regions in the order order_ring_by_rtt picks), and
estimates a hierarchical all-reduce from two simulated phases: the ring inside one region (its
reduce-scatter and all-gather together are that region's all-reduce of the whole buffer) and,
between them, one ring of four region representatives per shard, all shards at once on disjoint
hosts (an all-reduce of S / (N/4) across the regions).

    python3 bench/sim/scale.py --build build-rel [--peers 16,64,256,1024] [--bytes 1G]
"""

import argparse
import json
import subprocess
import tempfile
import time
from pathlib import Path

# In the ring order that order_ring_by_rtt picks: the cycle whose slowest crossing is fastest
# (us-as-eu-sa: 180, 170, 200 and 120 ms round trips; us-eu-as-sa would cross 300 ms as-sa).
REGIONS = ["us", "as", "eu", "sa"]
# One-way delays in ms, half of public round trips (WonderNetwork's tables): within a region, and
# between each pair of regions.
LOCAL_MS = 2
ACROSS_MS = {("us", "eu"): 40, ("us", "as"): 90, ("us", "sa"): 60, ("eu", "as"): 85, ("eu", "sa"): 100, ("as", "sa"): 150}


def world(per_region: int, regions=REGIONS) -> str:
    lines = [f"host {r} region={r} up=1gbit count={per_region}" for r in regions]
    lines += [f"delay {r} {r} {LOCAL_MS}ms" for r in regions]
    lines += [f"delay {a} {b} {ms}ms" for (a, b), ms in ACROSS_MS.items() if a in regions and b in regions]
    return "\n".join(lines + ["queue 4M", "mtu 1500", ""])


def sim(build: Path, text: str, nbytes: int, extra=()) -> dict:
    with tempfile.NamedTemporaryFile("w", suffix=".wan") as f:
        f.write(text)
        f.flush()
        t0 = time.monotonic()
        out = subprocess.run([str(build / "tools" / "wccl-sim"), f.name, "-b", str(nbytes), "--wire", "int8", "-n", "1",
                              "-w", "0", "--json", *extra], capture_output=True, text=True, check=True).stdout
        row = json.loads(out)["rows"][0]
        row["wall_s"] = time.monotonic() - t0
        return row


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build-rel")
    p.add_argument("--peers", default="16,64,256,1024")
    p.add_argument("--bytes", type=int, default=1 << 30)
    args = p.parse_args()
    build = Path(args.build)
    print(f"# {args.bytes} bytes, INT8 wire, 4 streams per link, 4 regions, 1 Gbit/s per host")
    print("| peers | flat ring (s) | of it, the 2(N-1) path steps (s) | hierarchical estimate (s): region ring + cross ring | "
          "gain | TCP connections per member today / neighbours only | coordinator messages per operation | "
          "simulator wall time (s) |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for n in (int(x) for x in args.peers.split(",")):
        m = n // 4
        flat = sim(build, world(m), args.bytes)
        # The latency part of the flat ring: the same ring with a buffer too small to matter.
        steps = sim(build, world(m), 4096 * n)
        local = sim(build, world(m, ["us"]), args.bytes)
        across = sim(build, world(1), max(args.bytes // m, 4096))
        hier = local["seconds"] + across["seconds"]
        # Links: today each member links to every other member of the epoch (Member::neighbours),
        # 4 streams each, plus its control connection; the algorithms need at most 8 (the ring's 2
        # and the two trees' parents and children). The coordinator receives and sends one message
        # per member per operation (DONE, COMMIT).
        print(f"| {n} | {flat['seconds']:.1f} | {steps['seconds']:.1f} | {hier:.1f} = {local['seconds']:.1f} + "
              f"{across['seconds']:.1f} | {flat['seconds'] / hier:.2f}× | {4 * (n - 1) + 1} / {4 * min(n - 1, 8) + 1} | {2 * n} | "
              f"{flat['wall_s'] + steps['wall_s'] + local['wall_s'] + across['wall_s']:.0f} |", flush=True)


if __name__ == "__main__":
    main()
