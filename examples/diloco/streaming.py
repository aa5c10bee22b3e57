"""Blocking against streaming DiLoCo on the WAN emulator (docs/trainer.md, "Streaming DiLoCo on a
WAN"): for each seed a blocking job and a streaming one of each configuration (same model, data,
H and tokens), then one blocking and one of the first configuration with a third node that dies
in an all-reduce; a Markdown table (compute utilisation per node, bytes per sync, mean and peak
wire rate, final held-out loss of the job's model, wall time, what the kill cost) and a plot of
the held-out loss against tokens and against wall time. Needs root (the emulator's namespaces).

    python examples/diloco/streaming.py --wan tools/wan/topologies/three-10mbit-50ms.wan \\
        --streaming 4,2,0.5 --seeds 0 1 --out runs/streaming -- --outer-steps 20 --inner-steps 8
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from compare import load, markdown_table, report, run_local  # noqa: E402

KILL_COST = "kill: extra wait s"


def measures(label: str, folder: Path, kill_step: int = -1) -> dict:
    """One job's row: every figure from the nodes' own records and the emulator's counters."""
    summary, steps, finals = load(folder)
    lead = steps["node0"]
    wall = finals["node0"]["time"] - steps["node0"][0]["time"] + lead[0]["inner_s"] + lead[0]["outer_s"]
    utilisation = {name: sum(r["inner_s"] for r in recs) / sum(r["inner_s"] + r["outer_s"] for r in recs)
                   for name, recs in steps.items() if recs and finals[name]}
    wire = summary["wan"]["counters"]
    sent = sum(c["sent(B)"] for c in wire.values())
    row = {"run": label, "utilisation per node": " ".join(f"{u:.2f}" for u in utilisation.values()),
           "MB per sync (node0)": max(r["bytes_sent"] for r in lead) / 1e6,
           "mean wire rate per host (Mbit/s)": sent * 8 / 1e6 / wall / sum(1 for c in wire.values() if c["sent(B)"]),
           "peak wire rate (Mbit/s)": peak_rate(summary["wan"].get("wire", {}), lead),
           "final eval loss": finals["node0"]["eval_loss"], "tokens": finals["node0"]["tokens"],
           "wall s (node0's steps)": wall, "identical": summary["identical"]}
    if kill_step >= 0:  # the time node0's compute stood still in the sync the kill hit, above the usual
        usual = statistics.median(r["outer_s"] for r in lead if r["step"] != kill_step + 1)
        hit = next(r for r in lead if r["step"] == kill_step + 1)
        row[KILL_COST] = hit["outer_s"] - usual
    return row


def peak_rate(wire: dict, lead: list) -> float:
    """The most any host's uplink sent in one of the forwarder's 100 ms bins, as Mbit/s, while
    node0 ran its steady syncs: from the end of its first to the end of its last but one. The first
    and the last sync go unpaced whatever --pace says (nothing measured yet; nothing to overlap)."""
    if not wire or len(lead) < 3:
        return float("nan")
    begin, end = lead[0]["unix_time"], lead[-2]["unix_time"]
    inside = [b for w in wire.values() for i, b in enumerate(w["bytes"])
              if begin <= w["start"] + i * w["bin_s"] and w["start"] + (i + 1) * w["bin_s"] <= end]
    bin_s = next(iter(wire.values()))["bin_s"]
    return max(inside, default=0) * 8 / 1e6 / bin_s


def plot(runs: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, (by_tokens, by_time) = plt.subplots(1, 2, figsize=(11, 4))
    for label, folder in runs.items():
        _, steps, finals = load(folder)
        lead, start = steps["node0"], steps["node0"][0]["time"] - steps["node0"][0]["inner_s"] - steps["node0"][0]["outer_s"]
        by_tokens.plot([r["tokens"] for r in lead], [r["eval_loss"] for r in lead], label=label)
        by_time.plot([r["time"] - start for r in lead], [r["eval_loss"] for r in lead], label=label)
    by_tokens.set_xlabel("tokens trained on by the job")
    by_time.set_xlabel("wall time from node0's first inner step (s)")
    for ax in (by_tokens, by_time):
        ax.set_ylabel("held-out loss of node0's model (nats/byte)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wan", required=True, help="topology file (3 hosts at least: the kill runs have 3 nodes)")
    p.add_argument("--forwarder", default=None, help="the wccl-wan-forward program (default: found in a build)")
    p.add_argument("--streaming", nargs="+", default=["4,2,0.5"], metavar="P,TAU,ALPHA[,PACE]",
                   help="the streaming runs of each seed, one job per configuration (PACE: train.py's --pace F, "
                        "default 0, unpaced); the kill runs take the first")
    p.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    p.add_argument("--kill-at", type=int, default=5, help="kill runs: node2 dies in the all-reduce after this "
                                                          "outer step (sync KILL_AT * P of a streaming run)")
    p.add_argument("--no-kill", action="store_true", help="leave out the kill runs")
    p.add_argument("--out", default="diloco-streaming")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then train.py's options, shared by every run")
    args = p.parse_args(argv)
    extra = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    configs = []  # (label, folder name, train.py's flags, syncs per outer step)
    for spec in args.streaming:
        fragments, overlap, mix, pace = (spec.split(",") + ["0"])[:4]
        paced = f" pace={pace}" if float(pace) else ""
        configs.append((f"streaming P={fragments} tau={overlap} alpha={mix}{paced}",
                        f"streaming-P{fragments}-tau{overlap}-alpha{mix}" + (f"-pace{pace}" if paced else ""),
                        ["--fragments", fragments, "--overlap", overlap, "--mix", mix, "--pace", pace], int(fragments)))
    out = Path(args.out)
    base = ["--wan", args.wan, "--local-ranks", "1", "--tls", "on"] + (["--forwarder", args.forwarder] if args.forwarder else [])
    jobs = []  # (label, folder, local_run arguments, the sync after which a node dies or -1)
    for seed in args.seeds:
        for name, folder, flags, _ in [("blocking", "blocking", [], 1)] + configs:
            jobs.append((f"{name}, seed {seed}", out / f"{folder}-{seed}",
                         base + ["--nodes", "2", "--", *extra, "--seed", str(seed), *flags], -1))
    if not args.no_kill:
        for name, folder, flags, per in (("blocking", "blocking", [], 1), configs[0]):
            kill = args.kill_at * per
            jobs.append((f"{name}, 3 nodes, node2 killed in sync {kill + 1}", out / f"{folder}-kill",
                         base + ["--nodes", "3", "--kill", f"node2@{kill}", "--", *extra, "--seed", str(args.seeds[0]),
                                 *flags], kill))
    rows, runs = [], {}
    for label, folder, job, kill in jobs:
        if not run_local(label, folder, job):
            return 1
        rows.append(measures(label, folder, kill))
        if kill < 0:
            runs[label] = folder
    table = "\n\n".join(markdown_table([r for r in rows if (KILL_COST in r) == k]) for k in (False, True)
                        if any((KILL_COST in r) == k for r in rows))
    (out / "rows.json").write_text(json.dumps(rows, indent=1))
    return report(out, table, lambda path: plot(runs, path), [folder for _, folder, _, _ in jobs])


if __name__ == "__main__":
    sys.exit(main())
