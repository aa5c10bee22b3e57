#!/usr/bin/env python3
"""What the torch.distributed backend "wccl" costs over calling wccl directly.

    PYTHONPATH=build/bindings/python .venv/bin/python bench/torch/backend_overhead.py --ranks 4

starts --ranks processes on 127.0.0.1 (TLS off unless WCCL_TLS_* are set) that each
init_process_group("wccl") and time, for each size, `dist.all_reduce(t)` and the same
all-reduce through the group's own wccl.Communicator (`Communicator.allreduce`), alternating the two
so that both see the same machine; every timed call starts after a barrier. Prints the median time
of each and their ratio (docs/perf.md, "torch.distributed backend").
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import timedelta


def rank_main(rank, n, store, sizes, reps):
    import torch
    import torch.distributed as dist
    import wccl.torch  # noqa: F401 (registers the backend)

    dist.init_process_group("wccl", init_method=f"file://{store}", rank=rank, world_size=n,
                            timeout=timedelta(seconds=600))
    comm = dist.group.WORLD._comm
    rows = []
    for size in sizes:
        t = torch.ones(size // 4)
        times = {"backend": [], "direct": []}
        for i in range(reps + 1):  # the first round warms up
            for how in ("backend", "direct") if i % 2 == 0 else ("direct", "backend"):
                t.fill_(1.0)
                dist.barrier()
                start = time.perf_counter()
                if how == "backend":
                    dist.all_reduce(t)
                else:
                    comm.allreduce(t)
                elapsed = time.perf_counter() - start
                if i > 0:
                    times[how].append(elapsed)
                assert t[0].item() == n, t[0].item()
        rows.append({"bytes": size, **{k: statistics.median(v) for k, v in times.items()}})
    dist.destroy_process_group()
    if rank == 0:
        print(json.dumps(rows), flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=4)
    ap.add_argument("--sizes", default="4M,256M", help="bytes per all-reduce, suffix K or M")
    ap.add_argument("--reps", type=int, default=10, help="timed calls of each kind per size")
    ap.add_argument("--rank", type=int, help=argparse.SUPPRESS)
    ap.add_argument("--store", help=argparse.SUPPRESS)
    a = ap.parse_args()
    sizes = [int(s[:-1]) << {"K": 10, "M": 20}[s[-1]] if s[-1] in "KM" else int(s) for s in a.sizes.split(",")]
    if a.rank is not None:
        return rank_main(a.rank, a.ranks, a.store, sizes, a.reps)
    env = dict(os.environ)
    env.setdefault("WCCL_TLS", "on" if env.get("WCCL_TLS_CERT") else "off")
    env.setdefault("WCCL_LOG_LEVEL", "error")
    with tempfile.TemporaryDirectory() as tmp:
        procs = [subprocess.Popen([sys.executable, __file__, "--ranks", str(a.ranks), "--sizes", a.sizes, "--reps",
                                   str(a.reps), "--rank", str(r), "--store", f"{tmp}/store"],
                                  env=env, stdout=subprocess.PIPE, text=True) for r in range(a.ranks)]
        out = procs[0].communicate()[0]
        if any(p.wait() != 0 for p in procs):
            sys.exit("a rank failed")
    print(f"{a.ranks} ranks on 127.0.0.1, TLS {env['WCCL_TLS']}, median of {a.reps} calls each\n")
    print("| bytes | dist.all_reduce (backend) | Communicator.allreduce (direct) | backend / direct |")
    print("|---:|---:|---:|---:|")
    for row in json.loads(out):
        size = f"{row['bytes'] >> 20} MiB" if row["bytes"] >= 1 << 20 else f"{row['bytes'] >> 10} KiB"
        print(f"| {size} | {row['backend'] * 1e3:.1f} ms | {row['direct'] * 1e3:.1f} ms | "
              f"{row['backend'] / row['direct']:.3f} |")


if __name__ == "__main__":
    main()
