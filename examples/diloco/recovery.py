"""How long the trainer takes to recover from each fault a real job meets, measured on whole jobs of
this machine (local_run.py) from the jobs' own clocks (docs/trainer.md, "Recovery"):

    python examples/diloco/recovery.py --out runs/recovery -- --outer-steps 8 --inner-steps 10 \
        --dim 96 --layers 3 --heads 4 --seq-len 64 --batch-size 8

One job per fault, two nodes of two local ranks, TLS: node1 SIGKILLed from outside 0.3 s into
outer step 4; node1 SIGSTOPped past peer_timeout_ms (7 s) from step 3 and resumed; the coordinator
SIGKILLed after step 3 and restarted a second later; a third node started after step 1. For a
fault: the time from it to node0's next committed outer step, and how much longer that step's
outer phase (all-reduce, update, state sync) took than the job's median. For the joiner: its
process start to admission to its first committed step, with where the start-up went.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

SCENARIOS = {
    "sigkill": ["--sigkill", "node1@3+0.3"],
    "freeze": ["--freeze", "node1@3:7"],
    "coordinator": ["--restart-coordinator-at", "3"],
    "join": ["--join-at", "1"],
}


def records(out: Path, node: str, event: str):
    path = out / f"{node}.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [r for r in map(json.loads, lines) if r["event"] == event]


def fault_row(name: str, out: Path, summary: dict) -> dict:
    fault = summary["faults"][0]
    steps = records(out, "node0", "step")
    median_outer = statistics.median(r["outer_s"] for r in steps)
    after = next(r for r in steps if r["unix_time"] > fault["unix_time"])
    return {"fault": name, "to_next_step_s": after["unix_time"] - fault["unix_time"], "step": after["step"],
            "inner_s": after["inner_s"], "outer_s": after["outer_s"], "extra_outer_s": after["outer_s"] - median_outer,
            "identical": summary["identical"]}


def join_row(out: Path, summary: dict) -> dict:
    joined = records(out, "node2", "joined")[0]
    first = records(out, "node2", "step")[0]
    start = summary["nodes"]["node2"]["started_unix"]
    return {"fault": "join", "to_admitted_s": joined["unix_time"] - start, "to_first_step_s": first["unix_time"] - start,
            **{k: joined[k] for k in ("import_s", "setup_s", "admission_s", "state_sync_s")},
            "identical": summary["identical"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="runs/recovery")
    p.add_argument("--only", choices=list(SCENARIOS), action="append", help="run only these scenarios")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then train.py's options")
    args = p.parse_args(argv)
    rows = []
    for name in args.only or SCENARIOS:
        out = Path(args.out) / name
        cmd = [sys.executable, str(HERE / "local_run.py"), "--nodes", "2", "--local-ranks", "2", "--out", str(out),
               "--coordinator-log", "warn", *SCENARIOS[name], *args.train_args]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        summary = json.loads((out / "summary.json").read_text())
        if proc.returncode != 0:
            print(f"{name}: the job failed (exit {proc.returncode}); logs in {out}", file=sys.stderr)
            return 1
        rows.append(join_row(out, summary) if name == "join" else fault_row(name, out, summary))
    (Path(args.out) / "recovery.json").write_text(json.dumps(rows, indent=1))
    for r in rows:
        print("  ".join(f"{k} {v:.2f}" if isinstance(v, float) else f"{k} {v}" for k, v in r.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
