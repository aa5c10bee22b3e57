"""DiLoCo against the synchronous baseline on the same model, data and token budget, and DiLoCo
with a node joining and one killed mid-run: three local jobs (local_run.py) one after the other,
then a Markdown table (final held-out loss, bytes on the wire per token, wall time) and a plot of
the held-out loss against outer steps and wall time.

    python examples/diloco/compare.py --out runs/compare -- --outer-steps 30 --inner-steps 20
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import local_run  # noqa: E402


def load(folder: Path):
    """Every node's step records and final records of one job."""
    summary = json.loads((folder / "summary.json").read_text())
    steps, finals = {}, {}
    for name in summary["nodes"]:
        records = local_run.read_records(folder / f"{name}.jsonl")
        steps[name] = [r for r in records if r["event"] == "step"]
        finals[name] = next((r for r in records if r["event"] == "final"), None)
    return summary, steps, finals


def row(label: str, folder: Path) -> dict:
    summary, steps, finals = load(folder)
    lead = steps["node0"]
    sent = sum(r["bytes_sent"] for recs in steps.values() for r in recs)
    tokens = lead[-1]["tokens"]
    return {"run": label, "final eval loss": lead[-1]["eval_loss"], "tokens": tokens,
            "bytes sent (all nodes)": sent, "bytes / token": sent / tokens, "wall s": lead[-1]["time"],
            "all-reduce s": sum(r["allreduce_s"] for r in lead), "identical": summary["identical"]}


def run_local(label: str, folder: Path, job: list) -> bool:
    """local_run.py with JOB's arguments into FOLDER, announced; False (saying where the logs are)
    when it failed."""
    print(f"== {label}: local_run.py --out {folder} {' '.join(job)}", flush=True)
    if local_run.main(["--out", str(folder), *job]) == 0:
        return True
    print(f"{label} failed: see {folder}/*.log")
    return False


def numerics(folders) -> str:
    """What the runs in FOLDERS computed with (each lead node's joined record): one line, or each
    difference named, since losses compare only between runs that agree on it (docs/trainer.md).
    Runs from before the trainer recorded it (a study widened with --reuse) are named as such."""
    seen, unknown = {}, []
    for folder in folders:
        joined = next((r for r in local_run.read_records(Path(folder) / "node0.jsonl") if r["event"] == "joined"), {})
        n = joined.get("numerics")
        if not n:
            unknown.append(Path(folder).name)
            continue
        key = (f"torch {n['torch']}, {n['cpu_kernels']} kernels, corpus sha256 {n['corpus_sha256'][:12]} "
               f"({n['corpus_bytes']} bytes), {joined.get('device', '?')}")
        seen.setdefault(key, []).append(Path(folder).name)
    if not seen:
        return "numerics: not recorded"
    if len(seen) == 1:
        line = f"numerics: {next(iter(seen))}"
    else:
        line = "numerics DIFFER between these runs, so their losses do not compare: " + "; ".join(
            f"{key}: {', '.join(names)}" for key, names in seen.items())
    return line + (f"; not recorded for {', '.join(unknown)}" if unknown else "")


def report(out: Path, table: str, draw, folders=()) -> int:
    """Writes OUT/table.md (with the numerics of the runs in FOLDERS) and the plot OUT/loss.png
    (``draw(path)``), prints where; returns 0."""
    out.mkdir(parents=True, exist_ok=True)
    if folders:
        table += "\n\n" + numerics(folders)
    (out / "table.md").write_text(table + "\n")
    draw(out / "loss.png")
    print(table)
    print(f"plot: {out / 'loss.png'}")
    return 0


def markdown_table(rows: list) -> str:
    """Rows (dicts with the same keys) as a Markdown table; floats to 4 significant digits."""
    keys = list(rows[0])
    lines = ["| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        lines.append("| " + " | ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in r.values()) + " |")
    return "\n".join(lines)


def plot(runs: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (by_step, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    for label, folder in runs.items():
        _, steps, _ = load(folder)
        lead = steps["node0"]
        by_step.plot([r["step"] for r in lead], [r["eval_loss"] for r in lead], label=label)
        by_time.plot([r["time"] for r in lead], [r["eval_loss"] for r in lead], label=label)
    by_step.set_xlabel("outer step (H inner steps each)")
    by_time.set_xlabel("wall time of node0 (s)")
    for ax in (by_step, by_time):
        ax.set_ylabel("held-out loss (nats/byte)")
        ax.grid(alpha=0.3)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="diloco-compare")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--local-ranks", type=int, default=2)
    p.add_argument("--join-at", type=int, default=5, help="the churn run: a node joins after this outer step")
    p.add_argument("--kill-at", type=int, default=15, help="the churn run: node1 dies in this outer step's all-reduce")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then train.py's options, shared by every run")
    args = p.parse_args(argv)
    extra = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    out = Path(args.out)
    base = ["--nodes", str(args.nodes), "--local-ranks", str(args.local_ranks)]
    runs = {"DiLoCo (INT8 wire)": out / "diloco", "synchronous DP (F32 wire)": out / "sync",
            f"DiLoCo, +1 node at step {args.join_at}, node1 killed at {args.kill_at + 1}": out / "churn"}
    jobs = [base + ["--", "--mode", "diloco", *extra], base + ["--", "--mode", "sync", *extra],
            base + ["--join-at", str(args.join_at), "--kill", f"node1@{args.kill_at}", "--", "--mode", "diloco", *extra]]
    for (label, folder), job in zip(runs.items(), jobs):
        if not run_local(label, folder, job):
            return 1
    return report(out, markdown_table([row(label, folder) for label, folder in runs.items()]),
                  lambda path: plot(runs, path), runs.values())


if __name__ == "__main__":
    sys.exit(main())
