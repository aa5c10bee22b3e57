#!/usr/bin/python3
"""All-reduce next to its peers: wccl (without and with TLS), Gloo (two algorithms), Open MPI.

Runs every program on the same sizes and peer count in one run, each R times interleaved
(repeat 1: every size, every tool; then repeat 2; ...) so that slow drifts of the machine touch all
tools alike, and prints a markdown report: the machine, the exact commands, then per size one row
per tool with the median time, the bus bandwidth and the ratios to wccl without TLS, and the CPU
each spent per GB all-reduced (user and system seconds of every rank's process over the timed
iterations, summed over ranks: bench/perf/sweep.h) with its ratio to Gloo ring_chunked's.

All programs take -b -e -n -w --json and print one JSON object (schema: PrintJson in bench/perf/sweep.cc) and
measure the same way (bench/perf/sweep.h). A program that is not built is skipped with a note.

  /usr/bin/python3 bench/compare/compare.py --build build --peers 4 --sizes 4K 256M -n 20,5 -w 5,2

Standard library only.
"""

import argparse
import json
import os
import platform
import re
import shlex
import shutil
import signal
import statistics
import subprocess
import sys
import time

BASELINE = "wccl-plain"
CPU_BASELINE = "gloo-ring_chunked"
SUFFIXES = {"": 0, "K": 10, "M": 20, "G": 30}


def parse_size(text):
    match = re.fullmatch(r"(\d+)([KMG]?)", text.strip().upper())
    if not match:
        raise argparse.ArgumentTypeError(f"bad size '{text}' (examples: 4096, 4K, 256M, 1G)")
    size = int(match.group(1)) << SUFFIXES[match.group(2)]
    if size < 4 or size % 4:
        raise argparse.ArgumentTypeError(f"size '{text}' is not a positive multiple of 4 bytes")
    return size


def format_size(size):
    for suffix, shift in (("G", 30), ("M", 20), ("K", 10)):
        if size >= 1 << shift and size % (1 << shift) == 0:
            return f"{size >> shift}{suffix}"
    return str(size)


def per_size_ints(text, nsizes, flag):
    """'-n 20' applies to every size; '-n 200,5' gives one value per size."""
    if text is None:
        return [None] * nsizes
    try:
        values = [int(v) for v in text.split(",")]
    except ValueError:
        sys.exit(f"compare.py: {flag} takes an int or a comma list of ints, not '{text}'")
    if len(values) == 1:
        return values * nsizes
    if len(values) != nsizes:
        sys.exit(f"compare.py: {flag} has {len(values)} values for {nsizes} sizes")
    return values


class Tool:
    """One program and the arguments that select what it measures."""

    def __init__(self, name, program, prefix, suffix, needs=(), tls=False):
        self.name = name  # the label in the table
        self.tls = tls  # the "tls" value its JSON must report
        self.program = program
        self.prefix = prefix  # argv before the program (mpirun ...)
        self.suffix = suffix  # tool-specific flags after the program
        self.needs = needs  # other executables that must be on PATH

    def missing(self):
        if not (os.path.isfile(self.program) and os.access(self.program, os.X_OK)):
            return f"{self.program} is not built"
        for exe in self.needs:
            if shutil.which(exe) is None:
                return f"{exe} is not on PATH"
        return None

    def argv(self, size, iters, warmup):
        args = ["-b", str(size), "-e", str(size)]
        if iters is not None:
            args += ["-n", str(iters)]
        if warmup is not None:
            args += ["-w", str(warmup)]
        return self.prefix + [self.program] + self.suffix + args + ["--json"]


def make_tools(build, peers, timeout_s):
    perf = os.path.join(build, "bench", "perf", "wccl-perf")
    gloo = os.path.join(build, "bench", "compare", "gloo-allreduce")
    mpi = os.path.join(build, "bench", "compare", "mpi-allreduce")
    local = ["--local", str(peers)]
    # Open MPI 4.1 over TCP on loopback rather than shared memory; mpi_allreduce.cc says why each
    # flag is there.
    mpirun = ["mpirun"]
    if os.geteuid() == 0:
        mpirun.append("--allow-run-as-root")
    mpirun += ["--oversubscribe", "--bind-to", "none", "-np", str(peers),
               "--mca", "pml", "ob1", "--mca", "btl", "tcp,self",
               "--mca", "btl_tcp_if_include", "lo"]
    return [
        Tool("wccl-plain", perf, [], local + ["--tls", "off"]),
        Tool("wccl-tls", perf, [], local, tls=True),
        Tool("gloo-ring_chunked", gloo, [],
             local + ["--algo", "ring_chunked", "--timeout-s", str(timeout_s)]),
        Tool("gloo-halving_doubling", gloo, [],
             local + ["--algo", "halving_doubling", "--timeout-s", str(timeout_s)]),
        Tool("openmpi", mpi, mpirun, [], needs=("mpirun",)),
    ]


def run_once(argv, timeout_s):
    """Runs one program in its own process group. Returns (parsed JSON or None, error or None,
    stderr, seconds)."""
    start = time.monotonic()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # The whole group: mpirun's ranks and gloo-allreduce's forked ranks go too.
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, err = proc.communicate()
        return None, f"timed out after {timeout_s} s", err, time.monotonic() - start
    elapsed = time.monotonic() - start
    if proc.returncode != 0:
        return None, f"exit status {proc.returncode}", err, elapsed
    try:
        doc = json.loads(out)
        results = doc["results"]
        if not isinstance(results, list) or len(results) != 1:
            raise ValueError("expected exactly one result")
        for key in ("bytes", "time_us"):
            float(results[0][key])
    except (ValueError, KeyError, TypeError) as e:
        return None, f"unreadable JSON on stdout ({e}): {out[:200]!r}", err, elapsed
    return doc, None, err, elapsed


def machine_info(build):
    model = "unknown"
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    info = {
        "nproc": len(os.sched_getaffinity(0)),
        "cpu": model,
        "kernel": " ".join(platform.uname()[i] for i in (0, 2, 3)),
    }
    try:
        with open(os.path.join(build, "meson-info", "intro-buildoptions.json")) as f:
            options = {o["name"]: o["value"] for o in json.load(f)}
        info["build"] = ", ".join(f"{name}={options.get(name)}"
                                  for name in ("buildtype", "optimization", "b_ndebug"))
    except (OSError, ValueError, KeyError):
        info["build"] = "unknown (no meson-info in the build directory)"
    return info


def fmt(value, digits):
    return "n/a" if value is None else f"{value:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--build", default="build", help="Meson build directory (default: build)")
    parser.add_argument("--peers", type=int, default=4, help="ranks per run (default: 4)")
    parser.add_argument("--sizes", nargs="+", type=parse_size, default=[4 << 10, 256 << 20],
                        help="message sizes in bytes, suffixes K M G (default: 4K 256M)")
    parser.add_argument("-n", dest="iters",
                        help="timed iterations: one int, or one per size (default: each tool's)")
    parser.add_argument("-w", dest="warmup",
                        help="warmup iterations: one int, or one per size (default: each tool's)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each tool and size, interleaved; the median is reported")
    parser.add_argument("--timeout", type=int, default=900, help="seconds allowed per run")
    parser.add_argument("--json-out", help="also write every run's raw output to this file")
    args = parser.parse_args()
    if args.peers < 2 or args.repeat < 1:
        sys.exit("compare.py: --peers must be at least 2 and --repeat at least 1")

    iters = per_size_ints(args.iters, len(args.sizes), "-n")
    warmup = per_size_ints(args.warmup, len(args.sizes), "-w")
    tools = make_tools(args.build, args.peers, args.timeout)
    notes = []
    active = []
    for tool in tools:
        reason = tool.missing()
        if reason:
            notes.append(f"skipped {tool.name}: {reason}")
        else:
            active.append(tool)
    if not active:
        sys.exit("compare.py: nothing to run:\n  " + "\n  ".join(notes))

    runs = []  # every run, in order
    times = {}  # (tool, size) -> [time_us of each successful run]
    wrong = {}  # (tool, size) -> total wrong elements over the runs (None: not reported)
    wire = {}  # (tool, size) -> wire_bytes of the last successful run
    cpu = {}  # (tool, size) -> [(user, system) CPU seconds per GB all-reduced, each run]
    failures = {}  # (tool, size) -> failed run count
    for rep in range(args.repeat):
        for si, size in enumerate(args.sizes):
            for tool in active:
                argv = tool.argv(size, iters[si], warmup[si])
                print(f"[{rep + 1}/{args.repeat}] {format_size(size)} {tool.name} ...",
                      end="", file=sys.stderr, flush=True)
                doc, error, err, elapsed = run_once(argv, args.timeout + 30)
                key = (tool.name, size)
                runs.append({"tool": tool.name, "size": size, "repeat": rep, "argv": argv,
                             "elapsed_s": round(elapsed, 3), "error": error, "output": doc,
                             "stderr": err[-4000:] if err else ""})
                if error:
                    failures[key] = failures.get(key, 0) + 1
                    print(f" FAILED: {error}", file=sys.stderr)
                    if err:
                        print("    " + "\n    ".join(err.strip().splitlines()[-5:]),
                              file=sys.stderr)
                    continue
                result = doc["results"][0]
                if doc.get("peers") != args.peers or doc.get("tls") != tool.tls:
                    note = (f"{tool.name} reported peers={doc.get('peers')} "
                            f"tls={doc.get('tls')}, expected {args.peers} and {tool.tls}")
                    if note not in notes:
                        notes.append(note)
                times.setdefault(key, []).append(float(result["time_us"]))
                if result.get("wrong") is not None:
                    wrong[key] = wrong.get(key, 0) + int(result["wrong"])
                if result.get("wire_bytes") is not None:
                    wire[key] = result["wire_bytes"]
                if result.get("cpu_user_s") is not None and result.get("iters"):
                    gb = size * int(result["iters"]) / 1e9
                    cpu.setdefault(key, []).append((float(result["cpu_user_s"]) / gb,
                                                    float(result["cpu_sys_s"]) / gb))
                print(f" {float(result['time_us']):.1f} us ({elapsed:.1f} s)", file=sys.stderr)

    info = machine_info(args.build)
    print("# All-reduce (fp32 sum) over TCP on 127.0.0.1: wccl and peers\n")
    print(f"- machine: {info['nproc']} CPUs ({info['cpu']}), kernel {info['kernel']}")
    print(f"- build: {info['build']} ({args.build})")
    print(f"- peers: {args.peers}; each command run {args.repeat} times, interleaved; "
          "median time reported; busbw = bytes / time * 2(N-1)/N")
    for note in notes:
        print(f"- note: {note}")
    print("\nCommands:\n\n```")
    for si, size in enumerate(args.sizes):
        for tool in active:
            print(shlex.join(tool.argv(size, iters[si], warmup[si])))
    print("```\n")

    factor = 2.0 * (args.peers - 1) / args.peers
    print(f"| size | tool | time (us) | runs min-max (us) | busbw (GB/s) "
          f"| {BASELINE} busbw / busbw | time / {BASELINE} time | #wrong "
          f"| CPU s/GB user + sys | CPU / {CPU_BASELINE}'s |")
    print("|---:|:---|---:|---:|---:|---:|---:|---:|---:|---:|")

    def cpu_per_gb(key):
        """Median user and system CPU seconds per GB over the runs, or None."""
        runs = cpu.get(key)
        if not runs:
            return None
        return statistics.median(u for u, _ in runs), statistics.median(s for _, s in runs)

    summary = []
    for size in args.sizes:
        base = times.get((BASELINE, size))
        base_time = statistics.median(base) if base else None
        for tool in active:
            key = (tool.name, size)
            samples = times.get(key)
            failed = failures.get(key, 0)
            if not samples:
                print(f"| {format_size(size)} | {tool.name} | failed ({failed} of "
                      f"{args.repeat} runs) | | | | | | | |")
                continue
            t = statistics.median(samples)
            busbw = size / t / 1e3 * factor
            bus_ratio = time_ratio = None
            if base_time:
                bus_ratio = (size / base_time / 1e3 * factor) / busbw
                time_ratio = t / base_time
            spread = f"{min(samples):.1f}-{max(samples):.1f}"
            if failed:
                spread += f" ({failed} failed)"
            w = wrong.get(key)
            own, base_cpu = cpu_per_gb(key), cpu_per_gb((CPU_BASELINE, size))
            cpu_text = "n/a" if own is None else f"{own[0]:.2f} + {own[1]:.2f} = {sum(own):.2f}"
            cpu_ratio = sum(own) / sum(base_cpu) if own and base_cpu and sum(base_cpu) > 0 else None
            print(f"| {format_size(size)} | {tool.name} | {t:.1f} | {spread} | {busbw:.3f} "
                  f"| {fmt(bus_ratio, 2)} | {fmt(time_ratio, 2)} | {'n/a' if w is None else w} "
                  f"| {cpu_text} | {fmt(cpu_ratio, 2)} |")
            summary.append({"tool": tool.name, "bytes": size, "time_us_median": t,
                            "time_us_runs": samples, "busbw": busbw, "wire_bytes": wire.get(key),
                            "wrong": w, "failed_runs": failed,
                            "cpu_user_s_per_gb": own[0] if own else None,
                            "cpu_sys_s_per_gb": own[1] if own else None,
                            f"cpu_over_{CPU_BASELINE}_cpu": cpu_ratio,
                            f"{BASELINE}_busbw_over_busbw": bus_ratio,
                            f"time_over_{BASELINE}_time": time_ratio})

    if args.json_out:
        with open(args.json_out, "w") as f:
            json.dump({"machine": info, "peers": args.peers, "repeat": args.repeat,
                       "notes": notes, "summary": summary, "runs": runs}, f, indent=1)
    any_wrong = any(w for w in wrong.values())
    return 1 if failures or any_wrong else 0


if __name__ == "__main__":
    sys.exit(main())
