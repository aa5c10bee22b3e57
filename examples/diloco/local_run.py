"""A whole DiLoCo job on this machine, for rehearsals, tests and the numbers in docs/trainer.md: a
job's certificates, a TLS coordinator, N nodes of L local ranks (each node one torchrun), and
optionally a node that joins mid-run and a node that is SIGKILLed in the middle of an all-reduce.
With ``--wan TOPOLOGY`` (root) each node runs on its own host of the WAN emulator (docs/wan.md), the
coordinator on the first.

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
sys.path.insert(0, str(HERE.parents[1] / "tools" / "wan"))
from group import make_pki, start_coordinator  # noqa: E402
from wan import Wan  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def addresses(args, index: int) -> list:
    """The node's --listen and --advertise: any free ports, or with --base-port the form docs/trainer.md
    gives for real nodes (listen on every interface, advertise HOST:PORT), node i at PORT + 10 i. On
    the WAN emulator, any port of the host's address (the coordinator sees it and tells the others)."""
    if args.wan:
        return ["--listen", "0.0.0.0:0"]
    if not args.base_port:
        return ["--listen", "127.0.0.1:0"]
    port = args.base_port + 10 * index
    return ["--listen", f"0.0.0.0:{port}", "--advertise", f"127.0.0.1:{port}"]


class CoordinatorProcess:
    """The job's coordinator, ``python -m wccl.coord`` in a process of its own, so that it can be
    SIGKILLed and started again on its port as an operator's restart would."""

    def __init__(self, args, pki: dict, out: Path, wan) -> None:
        flags = ["--min-peers", str(args.nodes), "--log-level", args.coordinator_log]
        flags += ["--tls", "off"] if args.tls == "off" else [
            "--tls-cert", pki["TLS_CERT"], "--tls-key", pki["TLS_KEY"], "--tls-ca", pki["TLS_CA"]]
        self.cmd = [sys.executable, "-m", "wccl.coord", *flags]
        self.host = "127.0.0.1"
        if wan:  # on the first emulated host: the others reach it across the emulated links
            self.cmd, self.host = wan.command(wan.names[0], self.cmd), wan.address(wan.names[0])
        self.log = out / "coordinator.log"
        self.log.unlink(missing_ok=True)
        self.proc, self.port = start_coordinator(self.cmd, os.environ, self.log, host=self.host)
        self.restarts = 0

    def restart(self, down: float) -> None:
        self.proc.kill()
        self.proc.wait()
        time.sleep(down)
        self.proc, _ = start_coordinator(self.cmd, os.environ, self.log, self.port, self.host)
        self.restarts += 1

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait()


def process_tree(root: int) -> list:
    """root and every process under it (from /proc): torchrun starts each worker in a session of
    its own, so a signal to torchrun's process group does not reach them."""
    children = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):  # gone meanwhile
                continue
            children.setdefault(ppid, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def signal_tree(root: int, sig: int) -> None:
    for pid in process_tree(root):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


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
    def __init__(self, name: str, index: int, args, coordinator: str, pki: dict, out: Path, extra, wan) -> None:
        self.name = name
        self.metrics = out / f"{name}.jsonl"
        self.metrics.unlink(missing_ok=True)
        cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(args.local_ranks),
               "--master-addr", "127.0.0.1", "--master-port", str(free_port()),
               str(HERE / "train.py"), "--coordinator", coordinator, "--node-name", name, *addresses(args, index),
               "--metrics", str(self.metrics), "--no-progress"]
        if args.tls == "off":
            cmd += ["--tls", "off"]
        else:
            cmd += ["--tls-cert", pki["TLS_CERT"], "--tls-key", pki["TLS_KEY"], "--tls-ca", pki["TLS_CA"]]
        cmd += extra
        if wan:
            if index >= len(wan.names):
                raise SystemExit(f"--wan {args.wan}: {len(wan.names)} hosts, not enough for node{index}")
            cmd = wan.command(wan.names[index], cmd)
        env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), PYTHONUNBUFFERED="1")
        self.started_unix = time.time()
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
    p.add_argument("--join-host", type=int, default=-1,
                   help="with --wan: the emulated host (its index) the joiner runs on, e.g. that of a node SIGKILLed "
                        "before (default: the next host)")
    p.add_argument("--kill", default="", help="NODE@STEP: after STEP outer steps, that node SIGKILLs itself in the next one's all-reduce")
    p.add_argument("--tls", choices=["on", "off"], default="on")
    p.add_argument("--base-port", type=int, default=0,
                   help="node i listens on 0.0.0.0:PORT+10i and advertises 127.0.0.1:PORT+10i (its local rank r on +r)")
    p.add_argument("--node-args", action="append", default=[], metavar="NODE=OPTIONS",
                   help="train.py options of one node only, after the common ones (e.g. node2='--inner-steps 3')")
    p.add_argument("--threads", type=int, default=1, help="OMP_NUM_THREADS of each local rank")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds before the run is called failed")
    p.add_argument("--sigkill", default="",
                   help="NODE@STEP[+SECONDS]: once node0 has done STEP outer steps (and SECONDS more), SIGKILL every "
                        "process of NODE from outside")
    p.add_argument("--freeze", default="",
                   help="NODE@STEP:SECONDS: once node0 has done STEP outer steps, SIGSTOP every process of NODE "
                        "for SECONDS, then SIGCONT")
    p.add_argument("--restart-coordinator-at", type=int, default=-1,
                   help="SIGKILL the coordinator once node0 has done this outer step, and start it again on its port")
    p.add_argument("--coordinator-down", type=float, default=1.0, help="seconds between that kill and the restart")
    p.add_argument("--coordinator-log", default="info", choices=["error", "warn", "info", "debug"],
                   help="the coordinator's log threshold (its log: OUT/coordinator.log)")
    p.add_argument("--wan", default="", metavar="TOPOLOGY",
                   help="run node i on host i of the WAN emulator (tools/wan; root), the coordinator on host 0; "
                        "the forwarder's counters and each host's bytes per 100 ms go into the summary")
    p.add_argument("--forwarder", default=None, help="the wccl-wan-forward program (default: found in a build)")
    p.add_argument("--out", default="diloco-run", help="folder for metrics and logs")
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- then train.py's options")
    args = p.parse_args(argv)
    extra = args.train_args[1:] if args.train_args[:1] == ["--"] else args.train_args
    if args.join_host >= 0 and not args.wan:
        p.error("--join-host is for --wan (nodes of one machine share its one host)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    pki = make_pki(out) if args.tls == "on" else {}
    kill_node, kill_step = (args.kill.split("@") + [""])[:2] if args.kill else ("", "")

    wan = Wan(args.wan, args.forwarder, log=out / "forwarder.log").up() if args.wan else None
    try:
        summary, failed = run(args, extra, out, pki, kill_node, kill_step, wan)
    finally:
        if wan:
            wan.down()
    if wan:
        summary["wan"] = {"topology": args.wan, "counters": wan.counters(), "wire": wan.wire()}
    (out / "summary.json").write_text(json.dumps(summary, indent=1))
    return 1 if failed else 0


def run(args, extra, out: Path, pki: dict, kill_node: str, kill_step: str, wan):
    """The job; returns its summary and whether it failed."""
    coord = CoordinatorProcess(args, pki, out, wan)
    address = f"{coord.host}:{coord.port}"
    nodes = []

    def start(name, host=-1):
        node_extra = extra + (["--fault-kill-at-step", kill_step] if name == kill_node else [])
        node_extra += [a for spec in args.node_args if spec.split("=", 1)[0] == name for a in spec.split("=", 1)[1].split()]
        nodes.append(Node(name, len(nodes) if host < 0 else host, args, address, pki, out, node_extra, wan))

    started = time.monotonic()
    for i in range(args.nodes):
        start(f"node{i}")
    joined = args.join_at < 0
    freeze_node, freeze_at, freeze_s = "", -1, 0.0
    if args.freeze:
        freeze_node, rest = args.freeze.split("@")
        freeze_at, freeze_s = int(rest.split(":")[0]), float(rest.split(":")[1])
    frozen_until = None  # while a node is stopped
    sigkill_node, sigkill_at, sigkill_after = "", -1, 0.0
    if args.sigkill:
        sigkill_node, rest = args.sigkill.split("@")
        sigkill_at, sigkill_after = int(rest.split("+")[0]), float((rest.split("+") + ["0"])[1])
    sigkill_due = None
    faults = []  # what was injected, when (Unix time)
    timed_out = True
    try:
        while time.monotonic() - started < args.timeout:
            if freeze_node and frozen_until is None and 0 <= freeze_at <= nodes[0].last_step():
                victim = next(n for n in nodes if n.name == freeze_node)
                signal_tree(victim.proc.pid, signal.SIGSTOP)
                faults.append({"fault": "freeze", "node": freeze_node, "unix_time": time.time()})
                frozen_until, freeze_at = time.monotonic() + freeze_s, -1
            if frozen_until is not None and time.monotonic() >= frozen_until:
                signal_tree(victim.proc.pid, signal.SIGCONT)
                faults.append({"fault": "resume", "node": freeze_node, "unix_time": time.time()})
                frozen_until = None
            if sigkill_node and sigkill_due is None and 0 <= sigkill_at <= nodes[0].last_step():
                sigkill_due, sigkill_at = time.monotonic() + sigkill_after, -1
            if sigkill_due is not None and time.monotonic() >= sigkill_due:
                signal_tree(next(n for n in nodes if n.name == sigkill_node).proc.pid, signal.SIGKILL)
                faults.append({"fault": "sigkill", "node": sigkill_node, "unix_time": time.time()})
                sigkill_due = None
            if coord.restarts == 0 and 0 <= args.restart_coordinator_at <= nodes[0].last_step():
                faults.append({"fault": "coordinator kill", "unix_time": time.time()})
                coord.restart(args.coordinator_down)
                faults.append({"fault": "coordinator up", "unix_time": time.time()})
            if not joined and nodes[0].last_step() >= args.join_at:
                start(f"node{len(nodes)}", args.join_host)
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

    summary = {"nodes": {}, "wall_s": time.monotonic() - started, "timed_out": timed_out,
               "coordinator_restarts": coord.restarts, "faults": faults}
    failed = timed_out
    hashes = set()
    for n in nodes:
        final = n.records("final")
        steps = [r["step"] for r in n.records("step")]
        joined_at = n.records("joined")
        info = {"exit": n.proc.returncode, "started_unix": n.started_unix, "steps": steps, "joined_at": joined_at[0]["step"] if joined_at else None,
                "hash": final[0]["hash"] if final else None,
                # torchrun's own process died of SIGKILL (--kill: the node killed its processes)
                "killed": not timed_out and n.proc.returncode == -signal.SIGKILL}
        summary["nodes"][n.name] = info
        if info["killed"] != (n.name in (kill_node, sigkill_node)):
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
    print("models identical" if len(hashes) == 1 else f"models differ: {len(hashes)} hashes", f"({summary['wall_s']:.0f} s)")
    return summary, failed


if __name__ == "__main__":
    sys.exit(main())
