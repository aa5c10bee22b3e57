"""A whole DiLoCo job on this machine, for rehearsals, tests and the numbers in docs/trainer.md: a
job's certificates, a TLS coordinator, N nodes of L local ranks (each node one torchrun), and
optionally a node that joins mid-run and a node that is SIGKILLed in the middle of an all-reduce.

    python examples/diloco/local_run.py --nodes 2 --local-ranks 2 --join-at 3 --kill node1@6 \
        --out runs/rehearsal -- --outer-steps 10 --inner-steps 10

Arguments after ``--`` go to every node's train.py. Prints one summary line per node and writes
``OUT/<node>.jsonl``, ``OUT/<node>.log`` and ``OUT/summary.json``; exits non-zero when a node that
should have finished did not, or the finished nodes' models differ.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "tools" / "devkit"))
from group import make_pki  # noqa: E402

import wccl  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def addresses(args, index: int) -> list:
    """The node's --listen and --advertise: any free ports, or with --base-port the form docs/trainer.md
    gives for real nodes (listen on every interface, advertise HOST:PORT), node i at PORT + 10 i."""
    if not args.base_port:
        return ["--listen", "127.0.0.1:0"]
    port = args.base_port + 10 * index
    return ["--listen", f"0.0.0.0:{port}", "--advertise", f"127.0.0.1:{port}"]


def read_records(path: Path):
    if not path.exists():
        return []
    records = []
    for line in path.read_text().splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:  # a line cut short by a kill
            pass
    return records


class Node:
    def __init__(self, name: str, index: int, args, coordinator: str, pki: dict, out: Path, extra) -> None:
        self.name = name
        self.metrics = out / f"{name}.jsonl"
        self.metrics.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.local_ranks),
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               str(HERE / "train.py"), "--coordinator", coordinator, "--node-name", name, *addresses(args, index),
               "--metrics", str(self.metrics), "--no-progress", "--admit-skew", str(args.admit_skew)]
        if args.tls == "off":
            cmd += ["--tls", "off"]
        else:
            cmd += ["--tls-cert", pki["TLS_CERT"], "--tls-key", pki["TLS_KEY"], "--tls-ca", pki["TLS_CA"]]
        cmd += extra
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONUNBUFFERED="1")
        self.log = open(out / f"{name}.log", "w")
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env, start_new_session=True)

    def records(self, event=None):
        return [r for r in read_records(self.metrics) if event is None or r.get("event") == event]

    def last_step(self) -> int:
        """The last outer step it logged: 0 once it joined, -1 before."""
        steps = self.records("step")
        return steps[-1]["step"] if steps else (0 if self.records("joined") else -1)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2, help="nodes at the start")
    p.add_argument("--local-ranks", type=int, default=2, help="local ranks (processes) per node")
    p.add_argument("--join-at", type=int, default=-1, help="start one more node once node0 has done this outer step (0: once it joined)")
    p.add_argument("--kill", default="", help="NODE@STEP: after STEP outer steps, that node SIGKILLs itself in the next one's all-reduce")
    p.add_argument("--tls", choices=["on", "off"], default="on")
    p.add_argument("--base-port", type=int, default=0,
                   help="node i listens on 0.0.0.0:PORT+10i and advertises 127.0.0.1:PORT+10i (its local rank r on +r)")
    p.add_argument("--node-args", action="append", default=[], metavar="NODE=OPTIONS",
                   help="train.py options of one node only, after the common ones (e.g. node2='--inner-steps 3')")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each local rank")
    p.add_argument("--admit-skew", type=float, default=10.0)
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before the run is called failed")
    p.add_argument("--coordinator-log", default="info", choices=["error", "warn", "info", "debug"],
                   help="the coordinator's log threshold (its log goes to stderr)")
    p.add_argument("--out", default="diloco-run", help="folder for metrics and logs")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then train.py's options")
    args = p.parse_args(argv)
    extra = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pki = make_pki(out) if args.tls == "on" else {}
    kill_node, kill_step = (args.kill.split("@") + [""])[:2] if args.kill else ("", "")

    coord_tls = {"tls": "off"} if args.tls == "off" else {k.lower(): v for k, v in pki.items()}
    coord = wccl.Coordinator(listen="127.0.0.1:0", min_peers=args.nodes, log_level=args.coordinator_log, **coord_tls)
    address = f"127.0.0.1:{coord.port}"
    nodes = []

    def start(name):
        node_extra = extra + (["--fault-kill-at-step", kill_step] if name == kill_node else [])
        node_extra += [a for spec in args.node_args if spec.split("=", 1)[0] == name for a in spec.split("=", 1)[1].split()]
        nodes.append(Node(name, len(nodes), args, address, pki, out, node_extra))

    started = time.monotonic()
    for i in range(args.nodes):
        start(f"node{i}")
    joined = args.join_at < 0
    timed_out = True
    try:
        while time.monotonic() - started < args.timeout:
            if not joined and nodes[0].last_step() >= args.join_at:
                start(f"node{len(nodes)}")
                joined = True
            if joined and all(n.proc.poll() is not None for n in nodes):
                timed_out = False
                break
            time.sleep(0.2)
    finally:
        for n in nodes:
            if n.proc.poll() is None:
                os.killpg(n.proc.pid, 9)
            n.proc.wait()
            n.log.close()
        coord.stop()

    summary, failed = {"nodes": {}, "wall_s": time.monotonic() - started, "timed_out": timed_out}, timed_out
    hashes = set()
    for n in nodes:
        final = n.records("final")
        steps = [r["step"] for r in n.records("step")]
        joined_at = n.records("joined")
        info = {"exit": n.proc.returncode, "steps": steps, "joined_at": joined_at[0]["step"] if joined_at else None,
                "hash": final[0]["hash"] if final else None,
                # torchrun's own process died of SIGKILL (--kill: the node killed its processes)
                "killed": not timed_out and n.proc.returncode == -signal.SIGKILL}
        summary["nodes"][n.name] = info
        if info["killed"] != (n.name == kill_node):
            failed = True
        elif not info["killed"]:
            if n.proc.returncode != 0 or not final:
                failed = True
            else:
                hashes.add(info["hash"])
        print(f"{n.name}: exit {n.proc.returncode}, joined at step {info['joined_at']}, steps {steps[:1]}..{steps[-1:]}, "
              f"hash {(info['hash'] or '-')[:16]}{' (killed)' if info['killed'] else ''}")
    summary["identical"] = len(hashes) == 1
    failed = failed or len(hashes) != 1
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    print("models identical" if len(hashes) == 1 else f"models differ: {len(hashes)} hashes", f"({summary['wall_s']:.0f} s)")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
