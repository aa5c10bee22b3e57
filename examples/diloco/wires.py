"""The pseudo-gradient's wire against the held-out loss: one local DiLoCo job (local_run.py) per
wire, with and without error feedback, per seed, on the same tokens; then a Markdown table (final
held-out loss per seed and its mean, bytes on the wire per token) and a plot of the mean held-out
loss against outer steps.

    python examples/diloco/wires.py --out runs/wires --seeds 0,1,2,3 -- --outer-steps 30 --inner-steps 10
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import compare  # noqa: E402

# (label, train.py options): the wires a job may choose, the lossy ones also with error feedback;
# topk2 keeps 2 of each block of 256 (0.8%, SparseLoCo's density) where topk keeps 8.
CONFIGS = [("native (F32)", ["--wire", "native"]), ("int8", ["--wire", "int8"]),
           ("int4", ["--wire", "int4"]), ("int4 + EF", ["--wire", "int4", "--error-feedback"]),
           ("fp8", ["--wire", "fp8"]), ("fp8 + EF", ["--wire", "fp8", "--error-feedback"]),
           ("int2", ["--wire", "int2"]), ("int2 + EF", ["--wire", "int2", "--error-feedback"]),
           ("topk", ["--wire", "topk"]), ("topk + EF", ["--wire", "topk", "--error-feedback"]),
           ("topk2 + EF", ["--wire", "topk", "--topk-keep", "2", "--error-feedback"])]


def plot(curves: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for label, (steps, losses) in curves.items():
        ax.plot(steps, losses, label=label)
    ax.set_xlabel("outer step")
    ax.set_ylabel("held-out loss (nats/byte), mean over seeds")
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", default="diloco-wires")
    p.add_argument("--nodes", type=int, default=2)
    p.add_argument("--local-ranks", type=int, default=1)
    p.add_argument("--seeds", default="0,1", help="model seeds: each configuration runs once per seed")
    p.add_argument("--only", default="", help="comma-separated labels of CONFIGS to run (default: all)")
    p.add_argument("--reuse", action="store_true", help="keep a run whose folder already holds a summary (a resumed "
                                                        "or widened study)")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then train.py's options, shared by every run")
    args = p.parse_args(argv)
    extra = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    seeds = [int(s) for s in args.seeds.split(",")]
    configs = [c for c in CONFIGS if not args.only or c[0] in args.only.split(",")]
    out = Path(args.out)
    rows, curves, folders = [], {}, []
    for label, options in configs:
        finals, sent, tokens, per_step = [], 0, 0, []
        for seed in seeds:
            folder = out / f"{label.replace(' ', '').replace('+', '-').replace('(', '').replace(')', '')}-s{seed}"
            job = ["--nodes", str(args.nodes), "--local-ranks", str(args.local_ranks), "--",
                   *options, "--seed", str(seed), "--no-progress", *extra]
            if args.reuse and (folder / "summary.json").exists():
                print(f"== {label}, seed {seed}: kept {folder}")
            elif not compare.run_local(f"{label}, seed {seed}", folder, job):
                return 1
            r = compare.row(label, folder)
            finals.append(r["final eval loss"])
            sent += r["bytes sent (all nodes)"]
            tokens += r["tokens"]
            _, steps, _ = compare.load(folder)
            per_step.append([(s["step"], s["eval_loss"]) for s in steps["node0"]])
            folders.append(folder)
        mean = sum(finals) / len(finals)
        rows.append({"wire": label, **{f"loss, seed {s}": f for s, f in zip(seeds, finals)}, "mean loss": mean,
                     "bytes / token": sent / tokens})
        n = min(len(c) for c in per_step)
        curves[label] = ([per_step[0][i][0] for i in range(n)],
                         [sum(c[i][1] for c in per_step) / len(per_step) for i in range(n)])
    int8 = next((r["mean loss"] for r in rows if r["wire"] == "int8"), None)
    for r in rows:
        r["mean loss vs int8"] = f"{(r['mean loss'] / int8 - 1) * 100:+.1f}%" if int8 else "-"
    return compare.report(out, compare.markdown_table(rows), lambda path: plot(curves, path), folders)


if __name__ == "__main__":
    sys.exit(main())
