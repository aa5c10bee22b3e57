"""torchft's DiLoCo beside this trainer on the WAN emulator (docs/trainer.md, "Beside torchft"): the
same model, data, H and tokens, one node (one process) per emulated host, root:

    python examples/diloco/torchft_compare.py --wan tools/wan/topologies/three-10mbit-50ms.wan \
        --out runs/torchft -- --outer-steps 20 --inner-steps 8

Three systems: torchft 0.2 over its gloo group (plaintext, F32: what it offers on CPUs), torchft over
wccl (``wccl.torchft.ProcessGroupWccl``: TLS, INT8 wire, an external wccl-coord) and train.py
(local_run.py: TLS, INT8, one local rank per node). Each runs two jobs: two nodes without faults
(seconds and bytes on the emulated links per outer step, the final held-out loss), and three nodes
of which node2 is SIGKILLed from outside ``--kill-after`` s after node0 committed outer step
``--kill-at``, a new node started on node2's host once node0 has committed two more (the kill to
the survivors' next commit; the joiner's process start to its first commit). torchft's lighthouse
(on the first host, its defaults but ``--min_replicas``: 2) and wccl's coordinator run on the first
host. Arguments after ``--`` go to both trainers (the options they share: steps, sizes, rates).
Writes OUT/table.md, OUT/results.json and every job's logs under OUT/<system>-<job>/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import local_run  # noqa: E402
from compare import markdown_table  # noqa: E402
from local_run import CoordinatorProcess, Wan, make_pki, read_records, signal_tree  # noqa: E402

SYSTEMS = {"torchft + gloo": ("gloo", "native"), "torchft + wccl": ("wccl", "int8"), "this trainer": None}
LIGHTHOUSE_PORT = 29510
MIN_REPLICAS = 2  # torchft's quorum: the fault jobs go on with the two survivors


def lighthouse_program() -> str:
    found = shutil.which("torchft_lighthouse") or str(Path(sys.executable).with_name("torchft_lighthouse"))
    if not Path(found).exists():
        raise SystemExit("torchft_lighthouse not found: pip install torchft==0.2.0")
    return found


def own_hostname(wan, host: str, cmd: list) -> list:
    """CMD on HOST of the emulator, in a UTS namespace whose hostname is the host's address: torchft
    and gloo name a process by its hostname (its checkpoint server's URL, gloo's device), and the
    emulated hosts share this machine's name."""
    return wan.command(host, ["unshare", "--uts", "sh", "-c", 'hostname "$0" && exec "$@"', wan.address(host), *cmd])


def torchft_job(system: str, nodes: int, fault: bool, args, train_args: list, out: Path) -> dict:
    """One torchft job on the emulator; the summary local_run.py writes for this trainer's jobs."""
    backend, wire = SYSTEMS[system]
    out.mkdir(parents=True, exist_ok=True)
    wan = Wan(args.wan, args.forwarder, log=out / "forwarder.log").up()
    procs, logs, started, faults = {}, [], {}, []
    lighthouse = coord = None
    try:
        env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", WCCL_LOG_LEVEL="warn")
        h0 = wan.names[0]
        logs.append(open(out / "lighthouse.log", "w"))
        lighthouse = subprocess.Popen(wan.command(h0, [lighthouse_program(), "--min_replicas", str(MIN_REPLICAS), "--bind",
                                                       f"0.0.0.0:{LIGHTHOUSE_PORT}"]),
                                      stdout=logs[-1], stderr=subprocess.STDOUT)
        if backend == "wccl":
            pki = make_pki(out)
            coord = CoordinatorProcess(SimpleNamespace(nodes=2, coordinator_log="warn", tls="on"), pki, out, wan)
            env.update({f"WCCL_{k}": v for k, v in pki.items()}, WCCL_COORDINATOR=f"{coord.host}:{coord.port}")

        def start(name: str, host: int) -> None:
            metrics = out / f"{name}.jsonl"
            cmd = [sys.executable, str(HERE / "torchft_train.py"), "--lighthouse",
                   f"http://{wan.address(h0)}:{LIGHTHOUSE_PORT}", "--replica-id", name,
                   "--host", wan.address(wan.names[host]), "--backend", backend, "--wire", wire, "--min-replicas", str(MIN_REPLICAS),
                   "--metrics", str(metrics), *train_args]
            logs.append(open(out / f"{name}.log", "w"))
            started[name] = time.time()
            procs[name] = subprocess.Popen(own_hostname(wan, wan.names[host], cmd), stdout=logs[-1],
                                           stderr=subprocess.STDOUT, env=env, start_new_session=True)

        def last_step(name: str) -> int:
            steps = records(out, name, "step")
            return steps[-1]["step"] if steps else 0

        for i in range(nodes):
            start(f"node{i}", i)
        deadline = time.monotonic() + args.timeout
        killed = joined = not fault
        while time.monotonic() < deadline and any(p.poll() is None for p in procs.values()):
            if not killed and last_step("node0") >= args.kill_at:
                time.sleep(args.kill_after)
                signal_tree(procs["node2"].pid, signal.SIGKILL)
                faults.append({"fault": "sigkill", "node": "node2", "unix_time": time.time()})
                killed = True
            if killed and not joined and last_step("node0") >= args.kill_at + 2:
                start(f"node{nodes}", 2)
                joined = True
            time.sleep(0.2)
    finally:
        for p in procs.values():
            if p.poll() is None:
                signal_tree(p.pid, signal.SIGKILL)
            p.wait()
        if lighthouse is not None and lighthouse.poll() is None:
            lighthouse.terminate()
            lighthouse.wait()
        if coord is not None:
            coord.stop()
        for f in logs:
            f.close()
        wan.down()
    summary = {"nodes": {}, "faults": faults, "wan": {"topology": args.wan, "counters": wan.counters()}}
    for name, p in procs.items():
        final = records(out, name, "final")
        summary["nodes"][name] = {"exit": p.returncode, "started_unix": started[name],
                                  "hash": final[0]["hash"] if final else None}
    finished = {n["hash"] for n in summary["nodes"].values() if n["exit"] == 0 and n["hash"]}
    summary["identical"] = len(finished) == 1
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return summary


def trainer_job(nodes: int, fault: bool, args, train_args: list, out: Path) -> dict:
    job = ["--wan", args.wan, "--nodes", str(nodes), "--local-ranks", "1", "--coordinator-log", "warn",
           "--timeout", str(args.timeout)]
    if args.forwarder:
        job += ["--forwarder", args.forwarder]
    if fault:
        job += ["--sigkill", f"node2@{args.kill_at}+{args.kill_after}", "--join-at", str(args.kill_at + 2),
                "--join-host", "2"]
    print(f"   local_run.py --out {out} {' '.join(job)} -- ...", flush=True)
    local_run.main(["--out", str(out), *job, "--", *train_args])
    return json.loads((out / "summary.json").read_text())


def records(out: Path, node: str, event: str) -> list:
    return [r for r in read_records(out / f"{node}.jsonl") if r.get("event") == event]


def steady_row(system: str, out: Path, summary: dict) -> dict:
    steps = records(out, "node0", "step")
    final = records(out, "node0", "final")
    sent = sum(c["sent(B)"] for c in summary["wan"]["counters"].values())
    gaps = [b["unix_time"] - a["unix_time"] for a, b in zip(steps, steps[1:])]
    return {"system": system, "s per outer step (median)": statistics.median(gaps) if gaps else float("nan"),
            "MB on the links per outer step": sent / max(1, len(steps)) / 1e6,
            "final held-out loss": final[0]["eval_loss"] if final else float("nan"),
            "outer steps": len(steps), "identical": summary["identical"]}


def fault_row(system: str, out: Path, summary: dict) -> dict:
    kill = next((f["unix_time"] for f in summary["faults"] if f["fault"] == "sigkill"), None)
    steps = records(out, "node0", "step")
    after = next((r["unix_time"] for r in steps if kill is not None and r["unix_time"] > kill), None)
    joiner = next((n for n in summary["nodes"] if n not in ("node0", "node1", "node2")), None)
    first = records(out, joiner, "step")[:1] if joiner else []
    final = records(out, "node0", "final")
    nan = float("nan")
    return {"system": system, "kill to next commit s": after - kill if after and kill else nan,
            "joiner start to first commit s": (first[0]["unix_time"] - summary["nodes"][joiner]["started_unix"]
                                               if first else nan),
            "final held-out loss": final[0]["eval_loss"] if final else nan,
            "finished nodes identical": summary["identical"]}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--wan", required=True, metavar="TOPOLOGY", help="the emulator's topology: three hosts or more")
    p.add_argument("--forwarder", default=None, help="the wccl-wan-forward program (default: found in a build)")
    p.add_argument("--kill-at", type=int, default=4, help="node2 is SIGKILLed once node0 committed this outer step")
    p.add_argument("--kill-after", type=float, default=0.3, help="... and this many seconds more")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before a job is stopped")
    p.add_argument("--only", action="append", choices=list(SYSTEMS), help="run only these systems")
    p.add_argument("--out", default="runs/torchft")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then options both trainers take")
    args = p.parse_args(argv)
    train_args = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    out = Path(args.out)
    steady, faulty = [], []
    for system in args.only or SYSTEMS:
        slug = system.replace(" + ", "-").replace(" ", "-")
        for fault in (False, True):
            folder = out / f"{slug}-{'fault' if fault else 'steady'}"
            nodes = 3 if fault else 2
            print(f"== {system}, {nodes} nodes{', node2 killed, a joiner' if fault else ''}", flush=True)
            summary = (trainer_job(nodes, fault, args, train_args, folder) if SYSTEMS[system] is None
                       else torchft_job(system, nodes, fault, args, train_args, folder))
            (faulty if fault else steady).append((fault_row if fault else steady_row)(system, folder, summary))
    table = markdown_table(steady) + "\n\n" + markdown_table(faulty)
    out.mkdir(parents=True, exist_ok=True)
    (out / "table.md").write_text(table + "\n")
    (out / "results.json").write_text(json.dumps({"steady": steady, "fault": faulty}, indent=1))
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
