#!/usr/bin/env python3
"""wccl-sim's --cpu argument from this machine's codec micro benchmark (docs/sim.md): runs
bench_codec (or reads its --benchmark_format=json output) and prints
reduce=GB/s,encode=GB/s,decode=GB/s,decode_reduce=GB/s,copy=GB/s,hash=GB/s, each the best
instruction-set tier's rate on the largest buffer (64 MiB: memory-bound, as a large all-reduce
is).

    python3 bench/sim/cpu_rates.py --build build-rel          # runs the benchmark
    python3 bench/sim/cpu_rates.py --json codec.json          # reads a saved run
"""

import argparse
import json
import subprocess
from pathlib import Path

KERNELS = {"reduce": "sum_f32", "encode": "int8_encode", "decode": "int8_decode", "decode_reduce": "int8_decode_add",
           "copy": "memcpy", "hash": "tensor_hash"}


def rates(report: dict) -> dict:
    runs = [b for b in report["benchmarks"] if b.get("run_type", "iteration") == "iteration"]
    largest = max(int(b["name"].rsplit("/", 1)[1]) for b in runs)
    best = {}
    for key, kernel in KERNELS.items():
        found = [b["bytes_per_second"] for b in runs
                 if b["name"].split("/")[0] == kernel and int(b["name"].rsplit("/", 1)[1]) == largest]
        if not found:
            raise SystemExit(f"no {kernel} at {largest} elements in the benchmark's output")
        best[key] = max(found) / 1e9
    return best


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--build", default="build-rel")
    p.add_argument("--json", help="a saved bench_codec --benchmark_format=json output")
    args = p.parse_args()
    if args.json:
        report = json.loads(Path(args.json).read_text())
    else:
        out = subprocess.run([str(Path(args.build) / "bench" / "micro" / "bench_codec"), "--benchmark_format=json",
                              "--benchmark_min_time=0.2"], capture_output=True, text=True, check=True).stdout
        report = json.loads(out)
    print(",".join(f"{k}={v:.2f}" for k, v in rates(report).items()))


if __name__ == "__main__":
    main()
