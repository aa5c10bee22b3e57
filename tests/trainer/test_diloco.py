"""The reference DiLoCo + FSDP2 trainer (examples/diloco) as a real job on this machine: a TLS
coordinator and torchrun nodes of two local ranks each (examples/diloco/local_run.py)."""

import json
import math
import os
import random
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
LOCAL_RUN = ROOT / "examples" / "diloco" / "local_run.py"
# A model of a few hundred thousand parameters and short steps: 2 cores run every process.
MODEL = ["--dim", "96", "--layers", "3", "--heads", "4", "--seq-len", "64", "--batch-size", "8"]


def job_env():
    """The nodes import the pip-installed wccl when scripts/test.sh installed one, else the build tree's."""
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if os.environ.get("WCCL_TEST_INSTALLED") != "1":
        env["PYTHONPATH"] = os.environ["WCCL_TEST_PYTHONPATH"]
    return env


def run_job(tmp_path, *args, timeout=600, check=True):
    out = tmp_path / "run"
    proc = subprocess.run([sys.executable, str(LOCAL_RUN), "--out", str(out), "--timeout", str(timeout - 60), *args],
                          env=job_env(), capture_output=True, text=True, timeout=timeout)
    logs = "".join(f"\n--- {p.name}\n{p.read_text()[-3000:]}" for p in sorted(out.glob("*.log")))
    assert proc.returncode == 0 or not check, proc.stdout + proc.stderr + logs
    summary = json.loads((out / "summary.json").read_text())
    records = {name: [strict_json(line) for line in (out / f"{name}.jsonl").read_text().splitlines()]
               for name in summary["nodes"]}
    return summary, records


def strict_json(line):
    """A metrics record, refusing what strict JSON has not (NaN, Infinity)."""
    def refuse(constant):
        raise ValueError(f"{constant} in a metrics record: {line}")
    return json.loads(line, parse_constant=refuse)


def train_py(code):
    """Runs code in a process that has imported examples/diloco/train.py as ``train``; returns its stdout."""
    prelude = f"import sys; sys.path.insert(0, {str(LOCAL_RUN.parent)!r}); import train\n"
    return subprocess.run([sys.executable, "-c", prelude + code], env=job_env(), capture_output=True, text=True,
                          check=True, timeout=120).stdout


@pytest.mark.skipif(os.environ.get("WCCL_TEST_INSTALLED") != "1", reason="no pip-installed wccl (scripts/test.sh)")
def test_the_installed_package_carries_its_library():
    code = "import wccl, os; print(wccl.LIBRARY_PATH); print(os.path.dirname(wccl.__file__))"
    lib, package = subprocess.run([sys.executable, "-c", code], env=job_env(), capture_output=True, text=True,
                                  check=True, cwd="/").stdout.split()
    # The wheel's library lies in meson-python's .wccl.mesonpy.libs beside the package (docs/python.md).
    assert "site-packages" in package and os.path.dirname(lib) == os.path.join(os.path.dirname(package),
                                                                               ".wccl.mesonpy.libs")


class Scraper(threading.Thread):
    """Reads node's Prometheus endpoint (train.py --metrics-port 0 prints its address in the node's
    log) every 0.2 s while the job runs: ``scrapes`` holds {series name + labels: value} per read."""

    def __init__(self, log):
        super().__init__(daemon=True)
        self.log, self.scrapes, self.done = log, [], False

    def run(self):
        from prometheus_client.parser import text_string_to_metric_families
        url = None
        while not self.done:
            time.sleep(0.2)
            if url is None:
                found = [w for w in (self.log.read_text().split() if self.log.exists() else []) if w.endswith("/metrics")]
                url = found[0] if found else None
                continue
            try:
                text = urllib.request.urlopen(url, timeout=5).read().decode()
            except OSError:
                continue  # (the node ended, or was not listening yet)
            values = {}
            for family in text_string_to_metric_families(text):
                for sample in family.samples:
                    labels = ",".join(f"{k}={v}" for k, v in sorted(sample.labels.items()) if k != "node")
                    values[sample.name + (f"{{{labels}}}" if labels else "")] = sample.value
            self.scrapes.append(values)


def test_loss_falls_a_joiner_catches_up_and_a_killed_node_is_dropped(tmp_path):
    # The joiner starts once node0 logged step 1 and needs 10-15 s on 2 busy cores (torch's import,
    # FSDP): 16 steps leave it room (with 14 and a start at step 2 it was once admitted only at the end).
    steps, kill = 16, 9
    scraper = Scraper(tmp_path / "run" / "node0.log")
    scraper.start()
    try:
        summary, records = run_job(tmp_path, "--nodes", "2", "--local-ranks", "2", "--join-at", "1", "--kill",
                                   f"node1@{kill}", "--", "--outer-steps", str(steps), "--inner-steps", "8",
                                   "--metrics-port", "0", *MODEL)
    finally:
        scraper.done = True
        scraper.join(timeout=10)
    nodes = summary["nodes"]
    # Every node that was not killed ends with the same parameters, bit for bit.
    assert summary["identical"] and nodes["node0"]["hash"] == nodes["node2"]["hash"]
    # No outer step lost or repeated: each survivor logged each step once, in order, to the end.
    assert nodes["node0"]["steps"] == list(range(1, steps + 1))
    first = nodes["node2"]["joined_at"]
    assert 1 <= first < steps and nodes["node2"]["steps"] == list(range(first + 1, steps + 1))
    # node1 died in the all-reduce of step kill + 1, which committed without it. (Whether the joiner
    # was admitted before that depends on how fast its processes start: both orders are right.)
    assert nodes["node1"]["exit"] == -signal.SIGKILL and nodes["node1"]["steps"][-1] == kill
    by_step = {r["step"]: r for r in records["node0"] if r["event"] == "step"}
    assert by_step[kill + 1]["nodes"] == by_step[kill]["nodes"] - 1 + (1 if first == kill else 0)
    # A joiner adds nothing to the step it is admitted in; it trains from the next one.
    joiner = [r for r in records["node2"] if r["event"] == "step"]
    assert all(r["eval_loss"] == by_step[r["step"]]["eval_loss"] for r in joiner)
    # The loss falls: the held-out loss at the end is below the first step's and well below ln(256),
    # an untrained model's.
    evals = [by_step[s]["eval_loss"] for s in range(1, steps + 1)]
    assert evals[-1] < min(evals[0] - 0.2, math.log(256) - 2.0), evals
    # DiLoCo's pseudo-gradients travel as INT8: a two-node ring step sends each element once, a
    # quarter of its F32 bytes (plus each 1024-element block's scale and offset).
    params = records["node0"][0]["params"]
    assert all(r["unix_time"] > 1.7e9 for r in records["node0"])
    two = [r for r in by_step.values() if r["nodes"] == 2 and r["step"] != kill + 1]
    assert two and all(0.25 * 4 * params <= r["bytes_sent"] < 0.27 * 4 * params for r in two), (params, two)
    # node0's Prometheus endpoint (--metrics-port) followed the job: its outer step and counters only
    # grow, and the last read before the end says what the JSONL says.
    seen = [s for s in scraper.scrapes if "wccl_trainer_outer_step" in s]
    assert len(seen) >= 2, scraper.scrapes[-1:]
    for name in ["wccl_trainer_outer_step", "wccl_trainer_tokens_total", "wccl_member_ops_committed_total",
                 "wccl_member_bytes_sent_total", "wccl_member_epochs_total"]:
        values = [s[name] for s in seen]
        assert values == sorted(values) and values[-1] > 0, (name, values)
    last = seen[-1]
    step = int(last["wccl_trainer_outer_step"])
    assert last["wccl_trainer_eval_loss"] == pytest.approx(by_step[step]["eval_loss"], rel=1e-9)
    assert last["wccl_trainer_bytes_sent_total"] == sum(by_step[k]["bytes_sent"] for k in range(1, step + 1))
    assert last["wccl_member_ops_committed_total"] >= step, last
    assert any(k.startswith("wccl_member_link_rtt_seconds{peer_rank=") and v > 0 for k, v in last.items()), last


def test_streaming_fragments_overlap_a_joiner_and_a_kill(tmp_path):
    """Streaming DiLoCo: two fragments synchronised in turn, each all-reduce overlapped with the next
    inner step, merged half and half with the local parameters; a node joins, one SIGKILLs itself
    in an all-reduce. Survivors end bit-identical, every sync once and in order, each of one
    fragment (half the bytes of a whole outer step's)."""
    syncs, kill = 20, 15  # the joiner waits from about sync 9: admitted at a boundary through the probe
    # Long enough (12 inner steps a sync) for the joiner's start-up (torch's import, FSDP) on 2 cores.
    summary, records = run_job(tmp_path, "--nodes", "2", "--local-ranks", "2", "--tls", "off", "--join-at", "1",
                               "--kill", f"node1@{kill}", "--node-args", "node2=--admit-timeout 120",
                               "--", "--outer-steps", str(syncs // 2), "--inner-steps", "24", "--fragments", "2",
                               "--overlap", "1", "--mix", "0.5", *MODEL)
    nodes = summary["nodes"]
    assert summary["identical"] and nodes["node0"]["hash"] == nodes["node2"]["hash"]
    assert nodes["node0"]["steps"] == list(range(1, syncs + 1))
    first = nodes["node2"]["joined_at"]
    assert 1 <= first < syncs and nodes["node2"]["steps"] == list(range(first + 1, syncs + 1))
    # A joiner is admitted at an outer step's boundary (every P syncs), or by the update after a loss.
    assert first % 2 == 0 or first == kill, first
    assert nodes["node1"]["exit"] == -signal.SIGKILL and nodes["node1"]["steps"][-1] == kill
    for name in ("node0", "node2"):
        steps = [r for r in records[name] if r["event"] == "step"]
        assert all(r["fragment"] == (r["step"] - 1) % 2 for r in steps), steps
        assert all(r["overlapped"] == (0 if r["step"] == syncs else 1) for r in steps), steps
        assert all(0.0 < r["utilisation"] <= 1.0 for r in steps)
    by_step = {r["step"]: r for r in records["node0"] if r["event"] == "step"}
    assert by_step[kill + 1]["nodes"] == by_step[kill]["nodes"] - 1 + (1 if first == kill else 0)
    # One fragment at a time on the wire: an INT8 half of the parameters per two-node sync.
    params = records["node0"][0]["params"]
    two = [r for r in by_step.values() if r["nodes"] == 2 and r["step"] != kill + 1]
    assert two and all(0.125 * 4 * params <= r["bytes_sent"] < 0.135 * 4 * params for r in two), (params, two)
    # The job's model (the outer parameters every node loads at the end) has learnt.
    finals = [r for name in ("node0", "node2") for r in records[name] if r["event"] == "final"]
    assert finals[0]["eval_loss"] == finals[1]["eval_loss"] < min(by_step[1]["eval_loss"] - 0.2, math.log(256) - 2.0)


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun") or not os.environ.get("WCCL_WAN_FORWARDER"),
                    reason="the WAN emulator needs root, /dev/net/tun and wccl-wan-forward (meson test names it)")
def test_streaming_against_blocking_on_the_wan_emulator(tmp_path):
    """examples/diloco/streaming.py, docs/trainer.md's WAN comparison, on a short job (one seed, 3
    outer steps; its kill runs included; streaming paced, --pace 0.5): nodes on emulated hosts at
    10 Mbit/s and 50 ms, TLS. Every job ends with identical models and the same tokens, a
    streaming sync moves a quarter of a blocking outer step's bytes (P = 4), every overlapped sync
    after the first is paced and the others are not, no host's wire carried more than its
    10 Mbit/s in any 100 ms, and the paced job's steady peak stayed near its highest rate."""
    out = tmp_path / "streaming"
    proc = subprocess.run([sys.executable, str(LOCAL_RUN.parent / "streaming.py"), "--wan",
                           str(ROOT / "tools" / "wan" / "topologies" / "three-10mbit-50ms.wan"), "--forwarder",
                           os.environ["WCCL_WAN_FORWARDER"], "--seeds", "0", "--kill-at", "1", "--out", str(out),
                           "--streaming", "4,2,0.5,0.5",
                           "--", "--outer-steps", "3", "--inner-steps", "8", *MODEL],
                          env=job_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    rows = json.loads((out / "rows.json").read_text())
    assert len(rows) == 4 and all(r["identical"] for r in rows), rows
    blocking, streaming = rows[0], rows[1]
    assert streaming["tokens"] == blocking["tokens"]
    assert 0.24 <= streaming["MB per sync (node0)"] / blocking["MB per sync (node0)"] <= 0.26, rows
    assert all(0 < u <= 1 for r in rows for u in map(float, r["utilisation per node"].split()))
    assert all(0 < r["peak wire rate (Mbit/s)"] <= 10 + 8 * 1500 / 1e5 for r in rows), rows  # a packet's slack
    steps = [json.loads(line) for line in (out / "streaming-P4-tau2-alpha0.5-pace0.5-0" / "node0.jsonl").read_text().splitlines()]
    steps = [r for r in steps if r["event"] == "step"]
    overlapped = [r for r in steps if r["overlapped"]]
    assert len(overlapped) == len(steps) - 1, steps  # all but the last sync
    assert overlapped[0]["max_link_rate"] == 0 and all(r["max_link_rate"] >= 125000 for r in overlapped[1:]), steps
    assert steps[-1]["max_link_rate"] == 0, steps
    highest = max(r["max_link_rate"] for node in ("node0", "node1")
                  for r in map(json.loads, (out / "streaming-P4-tau2-alpha0.5-pace0.5-0" / f"{node}.jsonl")
                               .read_text().splitlines()) if r["event"] == "step")
    # Headers, acknowledgements and the control traffic ride on top (1.06-1.13x in docs/trainer.md).
    assert rows[1]["peak wire rate (Mbit/s)"] <= 1.3 * highest * 8 / 1e6 + 0.5, (rows[1], highest)


@pytest.mark.skipif(os.geteuid() != 0 or not os.path.exists("/dev/net/tun") or not os.environ.get("WCCL_WAN_FORWARDER"),
                    reason="the WAN emulator needs root, /dev/net/tun and wccl-wan-forward (meson test names it)")
def test_torchft_over_wccl_beside_this_trainer_on_the_wan_emulator(tmp_path):
    """examples/diloco/torchft_compare.py, docs/trainer.md's side-by-side with torchft, on a short job
    and torchft over wccl only (the gloo and train.py jobs are the same script's other branches):
    torchft's DiLoCo over wccl.torchft.ProcessGroupWccl (TLS, INT8) on emulated hosts at 10 Mbit/s
    and 50 ms trains two nodes to identical models; with three, node2 SIGKILLed from outside, the
    survivors commit again and a joiner started on node2's host heals from them and commits too."""
    pytest.importorskip("torchft")
    out = tmp_path / "torchft"
    proc = subprocess.run([sys.executable, str(LOCAL_RUN.parent / "torchft_compare.py"), "--wan",
                           str(ROOT / "tools" / "wan" / "topologies" / "three-10mbit-50ms.wan"), "--forwarder",
                           os.environ["WCCL_WAN_FORWARDER"], "--only", "torchft + wccl", "--kill-at", "2",
                           "--timeout", "240", "--out", str(out), "--", "--outer-steps", "24", "--inner-steps", "4",
                           *MODEL],
                          env=job_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    results = json.loads((out / "results.json").read_text())
    [steady], [fault] = results["steady"], results["fault"]
    assert steady["identical"] and steady["outer steps"] == 24, steady
    assert steady["MB on the links per outer step"] > 0, steady
    assert 0 < fault["kill to next commit s"] < 60, fault
    assert 0 < fault["joiner start to first commit s"] < 120, fault
    assert fault["finished nodes identical"], fault


def test_the_wire_study_on_a_short_job(tmp_path):
    """examples/diloco/wires.py, docs/trainer.md's wire table, on a short job (one seed, 3 outer
    steps): INT8, and TOPK with error feedback keeping 8 and 2 of each block of 256 (--topk-keep),
    both nodes identical in each, the table and its bytes per token (TOPK's 16 and 7 bytes per 256
    elements against INT8's 1032 per 1024), and the numerics the runs shared."""
    out = tmp_path / "wires"
    proc = subprocess.run([sys.executable, str(LOCAL_RUN.parent / "wires.py"), "--out", str(out), "--seeds", "0",
                           "--only", "int8,topk + EF,topk2 + EF", "--", "--outer-steps", "3", "--inner-steps", "3", *MODEL],
                          env=job_env(), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-5000:] + proc.stderr[-5000:]
    assert proc.stdout.count("models identical") == 3, proc.stdout
    lines = (out / "table.md").read_text().splitlines()
    rows = [line.split("|")[1:-1] for line in lines[2:] if line.startswith("|")]
    # The three runs computed alike (one line naming torch, its CPU kernels and the corpus).
    assert lines[-1].startswith("numerics: torch ") and "corpus sha256 " in lines[-1], lines[-1]
    per_token = {r[0].strip(): float(r[-2]) for r in rows}
    assert set(per_token) == {"int8", "topk + EF", "topk2 + EF"}
    assert 15 < per_token["int8"] / per_token["topk + EF"] < 17, per_token
    # --topk-keep 2: 7 bytes per block of 256 against 16 at the default 8.
    assert 2.1 < per_token["topk + EF"] / per_token["topk2 + EF"] < 2.4, per_token


def test_a_table_of_runs_that_computed_differently_says_so(tmp_path):
    """compare.numerics: runs whose torch kernels (or corpus) differ do not compare, and the
    table's last line names which run had which; runs that recorded none are named apart."""
    def job(name, kernels):
        folder = tmp_path / name
        folder.mkdir()
        n = {"torch": "2.13.0+cpu", "cpu_kernels": kernels, "corpus_bytes": 100, "corpus_sha256": "ab" * 32}
        joined = {"event": "joined", "device": "cpu", **({"numerics": n} if kernels else {})}
        (folder / "node0.jsonl").write_text(json.dumps(joined) + "\n")
        return folder
    code = f"""
import sys; sys.path.insert(0, {str(LOCAL_RUN.parent)!r}); import compare
print(compare.numerics([{str(job("a", "AVX512"))!r}, {str(job("b", "AVX512"))!r}]))
print(compare.numerics([{str(tmp_path / "a")!r}, {str(job("c", "AVX2"))!r}]))
print(compare.numerics([{str(tmp_path / "a")!r}, {str(job("old", None))!r}]))
"""
    same, differ, older = subprocess.run([sys.executable, "-c", code], env=job_env(), capture_output=True,
                                         text=True, timeout=120, check=True).stdout.splitlines()
    assert same == "numerics: torch 2.13.0+cpu, AVX512 kernels, corpus sha256 abababababab (100 bytes), cpu", same
    # A run recorded before numerics were (a study widened with --reuse) is named, not a difference.
    assert older == same + "; not recorded for old", older
    assert differ.startswith("numerics DIFFER"), differ
    assert "AVX512 kernels" in differ and ": a" in differ and "AVX2 kernels" in differ and ": c" in differ, differ


def test_streaming_flags_are_checked():
    out = train_py("""
print(train.fragment_bounds(10, 3), train.fragment_bounds(4, 1))
for flags in (["--fragments", "3"], ["--fragments", "2", "--overlap", "3"], ["--mix", "1"],
              ["--mode", "sync", "--fragments", "2"], ["--pace", "0.5"], ["--overlap", "1", "--pace", "1.5"]):
    try:
        train.main(["--coordinator", "h:1", "--tls", "off", "--inner-steps", "4", *flags])
    except SystemExit as e:
        print(e)
""").splitlines()
    assert out == ["[(0, 3), (3, 6), (6, 10)] [(0, 4)]",
                   "--fragments 3: must be at least 1 and divide --inner-steps 4",
                   "--overlap 3: from 0 to H/P = 2 inner steps",
                   "--mix 1.0: from 0 (take the outer parameters) to below 1",
                   "--fragments, --overlap, --mix and --pace are for --mode diloco",
                   "--pace 0.5: from 0 (unpaced) to 1, with --overlap",
                   "--pace 1.5: from 0 (unpaced) to 1, with --overlap"]


def test_synchronous_baseline_agrees_and_sends_more(tmp_path):
    summary, records = run_job(tmp_path, "--nodes", "2", "--local-ranks", "2", "--tls", "off",
                               "--", "--mode", "sync", "--outer-steps", "2", "--inner-steps", "4", *MODEL)
    assert summary["identical"]
    steps = [r for r in records["node0"] if r["event"] == "step"]
    assert [r["step"] for r in steps] == [1, 2] and steps[-1]["eval_loss"] < steps[0]["eval_loss"]
    # Every inner step's F32 gradients cross the ring: each element once per step with two nodes.
    params = records["node0"][0]["params"]
    assert all(r["bytes_sent"] >= 4 * 4 * params for r in steps)


def free_ports(count):
    """A base port P with P .. P + count - 1 free on every interface (checked, then released)."""
    for _ in range(50):
        with socket.socket() as s:
            s.bind(("0.0.0.0", 0))
            base = s.getsockname()[1]
        if base + count > 65535:
            continue
        try:
            held = []
            for port in range(base, base + count):
                held.append(socket.socket())
                held[-1].bind(("0.0.0.0", port))
            return base
        except OSError:
            continue
        finally:
            for h in held:
                h.close()
    raise RuntimeError("no free port range")


def test_documented_fixed_ports_with_two_local_ranks(tmp_path):
    """docs/trainer.md's form for real nodes, --listen 0.0.0.0:PORT --advertise HOST:PORT with two
    local ranks: each rank takes PORT + its local rank (both used to take PORT: address in use)."""
    summary, records = run_job(tmp_path, "--nodes", "2", "--local-ranks", "2", "--base-port", str(free_ports(12)),
                               "--", "--outer-steps", "2", "--inner-steps", "3", *MODEL)
    assert summary["identical"] and [r["contributors"] for r in records["node0"] if r["event"] == "step"] == [2, 2]


def test_rank_addresses_and_data_seeds():
    out = train_py("""
print(train.rank_address("0.0.0.0:48200", 1), train.rank_address("[::]:48200", 3), train.rank_address("h:0", 2),
      repr(train.rank_address("", 1)))
seeds = {train.data_seed(0, name, step, rank) for name in ["gpu-node-01", "gpu-node-02", "worker-1", "worker-2"]
         for step in [0, 7] for rank in [0, 1]}
print(len(seeds))
""").split()
    assert out == ["0.0.0.0:48201", "[::]:48203", "h:0", "''", "16"]


def test_a_misconfigured_node_is_refused_and_the_job_goes_on(tmp_path):
    """Three nodes start together and one has another H: it is refused with a message on that node and
    leaves; the other two train with identical models. (A misfit that joins mid-run meets the same
    rule: tests/trainer/test_membership.py.)"""
    summary, _ = run_job(tmp_path, "--nodes", "3", "--local-ranks", "2", "--tls", "off", "--node-args",
                         "node2=--inner-steps 3", "--", "--outer-steps", "3", "--inner-steps", "2", *MODEL,
                         check=False, timeout=300)
    nodes = summary["nodes"]
    assert nodes["node2"]["exit"] == 1 and nodes["node2"]["steps"] == [], nodes["node2"]
    assert "refused by the job" in (tmp_path / "run" / "node2.log").read_text()
    assert nodes["node0"]["steps"] == nodes["node1"]["steps"] == [1, 2, 3]
    assert nodes["node0"]["hash"] == nodes["node1"]["hash"]


def test_a_job_resumes_from_its_checkpoints(tmp_path):
    """A job of two nodes writes a checkpoint at every outer step into one shared directory and ends
    at step 3. A new job (new coordinator) with --resume: node0 finds the checkpoints and starts at
    step 3, not 0; node1, pointed at an empty directory, starts fresh and receives node0's state at
    admission; both train steps 4 and 5 to the same parameters, and the job's token count goes on
    from where it was. Only the two newest checkpoints are kept; another configuration's files of
    the same step in the same directory are passed over."""
    ckpt, empty = tmp_path / "ckpt", tmp_path / "empty"
    common = ["--inner-steps", "2", "--checkpoint-dir", str(ckpt), "--checkpoint-every", "1", *MODEL]
    first, first_records = run_job(tmp_path / "a", "--nodes", "2", "--local-ranks", "2", "--tls", "off", "--",
                                   "--outer-steps", "3", *common, timeout=300)
    assert first["nodes"]["node0"]["steps"] == [1, 2, 3]
    kept = sorted(p.name for p in (ckpt / "node0" / "rank1").iterdir())
    assert kept == ["step-00000002.pt", "step-00000003.pt"]
    # Another job of another configuration shares the directory and reached step 3 too: its files
    # are passed over, not taken as "no step 3 here" (16 of its nodes: in whatever order the
    # directory lists them, one almost surely comes before ours, which the old code then took alone).
    import torch
    for rank in (0, 1):
        state = torch.load(ckpt / "node0" / f"rank{rank}" / "step-00000003.pt", weights_only=True)
        state["fingerprint"] = "another configuration"
        for other in (f"other{i}" for i in range(16)):
            (ckpt / other / f"rank{rank}").mkdir(parents=True, exist_ok=True)
            torch.save(state, ckpt / other / f"rank{rank}" / "step-00000003.pt")
    second, records = run_job(tmp_path / "b", "--nodes", "2", "--local-ranks", "2", "--tls", "off", "--node-args",
                              f"node1=--checkpoint-dir {empty}", "--", "--outer-steps", "5", *common, "--resume",
                              timeout=300)
    nodes = second["nodes"]
    assert [r["step"] for r in records["node0"] if r["event"] == "joined"] == [3]
    assert nodes["node0"]["steps"] == nodes["node1"]["steps"] == [4, 5]
    assert second["identical"] and nodes["node0"]["hash"] == nodes["node1"]["hash"]
    tokens = {r["step"]: r["tokens"] for r in first_records["node0"] if r["event"] == "step"}
    step4 = [r for r in records["node0"] if r["event"] == "step"][0]
    assert step4["tokens"] == tokens[3] + (tokens[3] - tokens[2])  # two nodes, as in step 3
    assert "resuming from the checkpoint of outer step 3" in (tmp_path / "b" / "run" / "node0.log").read_text()


def test_coordinator_killed_and_restarted_then_a_node_killed(tmp_path):
    """The coordinator process is SIGKILLed once node0 has done step 2 and started again on its port a
    second later; then node1 is killed in the all-reduce of step 5. The survivors end identical, each
    logging every outer step once, in order. (A join that meets the restart:
    tests/python/test_torch_mesh.py.)"""
    steps = 7
    summary, records = run_job(tmp_path, "--nodes", "3", "--local-ranks", "2", "--restart-coordinator-at", "2",
                               "--kill", "node1@4", "--", "--outer-steps", str(steps), "--inner-steps", "4", *MODEL)
    nodes = summary["nodes"]
    assert summary["coordinator_restarts"] == 1 and summary["identical"]
    assert nodes["node0"]["steps"] == nodes["node2"]["steps"] == list(range(1, steps + 1))
    assert nodes["node1"]["exit"] == -signal.SIGKILL and nodes["node1"]["steps"][-1] == 4
    assert [r["contributors"] for r in records["node0"] if r["event"] == "step"] == [3, 3, 3, 3, 2, 2, 2]


@pytest.mark.parametrize("wire", ["int4", "int2"])
def test_a_diverged_node_sits_the_step_out(tmp_path, wire):
    """node1's pseudo-gradient of step 3 holds a NaN on one local rank (a rehearsal flag: nothing
    outside can put a NaN into a model). The node agrees on it over its local ranks, sends nothing,
    is not counted, and trains again from the committed state: every node ends identical, the step
    divided by the two nodes that trained. With error feedback, whose residual must not take the
    NaN in, on the INT4 wire (the ring) and the INT2 wire (the all-gather schedule)."""
    summary, records = run_job(tmp_path, "--nodes", "3", "--local-ranks", "2", "--tls", "off",
                               "--node-args", "node1=--fault-nan-at-step 2",
                               "--", "--outer-steps", "5", "--inner-steps", "3", "--wire", wire, "--error-feedback",
                               *MODEL)
    assert summary["identical"] and all(n["steps"] == [1, 2, 3, 4, 5] for n in summary["nodes"].values())
    steps = [r for r in records["node0"] if r["event"] == "step"]
    assert [r["contributors"] for r in steps] == [3, 3, 2, 3, 3]
    assert all(math.isfinite(r["eval_loss"]) for r in steps)
    assert "is not finite: this node sits the step out" in (tmp_path / "run" / "node1.log").read_text()


@pytest.mark.parametrize("wire,keep", [("INT4", 0), ("TOPK", 2)])
def test_error_feedback_sends_every_pseudo_gradient_in_the_end(wire, keep):
    """Error feedback's invariant: what a rank has sent (the wire's roundtrip of each pseudo-gradient
    plus the residual before it, at the all-reduce's keep on TOPK) and its residual now add up to
    the sum of its pseudo-gradients."""
    out = train_py(f"""
import torch, wccl
torch.manual_seed(0)
residual = torch.zeros(10000)
deltas = [torch.randn(10000) * 1e-3 * (1 + 100 * (torch.rand(10000) < 0.01)) for _ in range(6)]
sent = torch.zeros(10000, dtype=torch.float64)
for d in deltas:
    d = d.clone()
    train.feed_back(d, residual, wccl.Wire.{wire}, {keep})
    sent += wccl.wire_roundtrip(d.clone(), wccl.Wire.{wire}, topk_keep={keep}).double()
total = sum(d.double() for d in deltas)
gap = (sent + residual.double() - total).abs().max().item()
without = (sum(wccl.wire_roundtrip(d.clone(), wccl.Wire.{wire}, topk_keep={keep}).double() for d in deltas)
           - total).abs().max().item()
print(gap, without, residual.abs().max().item())
""")
    gap, without, residual = map(float, out.split())
    assert gap < 1e-6, "sent + residual is the sum of the pseudo-gradients, up to float rounding"
    assert without > 100 * gap, "without the residual the wire's errors add up"
    assert 0 < residual < (0.1 if wire == "INT4" else 1.0)  # TOPK holds back what it has not sent yet


def test_a_node_frozen_from_outside_past_the_peer_timeout(tmp_path):
    """Every process of node1 is SIGSTOPped from outside for 7 s, past peer_timeout_ms (5 s): node0's
    all-reduce waits until node1 is declared lost, goes on without it, and node1, resumed, is
    admitted again and brought up to date: both end identical, node0 with every step once."""
    steps = 40
    summary, _ = run_job(tmp_path, "--nodes", "2", "--local-ranks", "2", "--tls", "off", "--freeze", "node1@2:7",
                         "--", "--outer-steps", str(steps), "--inner-steps", "3", *MODEL, timeout=300)
    nodes = summary["nodes"]
    assert nodes["node0"]["hash"] == nodes["node1"]["hash"]
    assert nodes["node0"]["steps"] == list(range(1, steps + 1)) and nodes["node1"]["steps"][-1] == steps
    assert [f["fault"] for f in summary["faults"]] == ["freeze", "resume"]


def test_a_joiner_left_without_the_jobs_state_waits_for_it(tmp_path):
    """Issue 31's bugs 8 and 9, from outside: the job's only node is SIGSTOPped for 25 s (past the
    5 s peer timeout) as a joiner starts. The joiner, alone, is in an epoch that wccl formed after
    the job's last node was lost (AFTER_LOSS): it must not begin the job again from step 0. It waits;
    node0, resumed, is admitted again, and the joiner receives its state: both end identical,
    node0 with every step once."""
    steps = 10
    summary, records = run_job(tmp_path, "--nodes", "1", "--local-ranks", "1", "--tls", "off", "--join-at", "1",
                               "--freeze", "node0@1:25", "--", "--outer-steps", str(steps), "--inner-steps", "3",
                               *MODEL, timeout=300)
    nodes = summary["nodes"]
    assert summary["identical"] and [f["fault"] for f in summary["faults"]] == ["freeze", "resume"]
    assert nodes["node0"]["steps"] == list(range(1, steps + 1)), nodes["node0"]["steps"]
    assert nodes["node1"]["joined_at"] >= 1 and nodes["node1"]["steps"][-1] == steps, nodes["node1"]
    log = (tmp_path / "run" / "node1.log").read_text()
    assert "no node here holds the job's state" in log, log[-3000:]


@pytest.mark.parametrize("policy", ["wait", "drop"])
def test_a_node_frozen_past_op_timeout_keeps_the_healthy_node_whole(tmp_path, monkeypatch, policy):
    """node1 is SIGSTOPped for 4 s, past a 1.5 s op_timeout_ms but within peer_timeout_ms (5 s):
    node0's all-reduce and then its updates time out while node1 is frozen. node0 updates again
    each time; it used to retreat (leave its groups and join again), and node1, resumed, then
    committed the step alone and node0 lost its work of it. Either node1 is in every step, or it
    is declared lost (it used to be by a probe after node0's cancelled all-reduce closed their
    links; those closes are not reported now, so by heartbeats) in both of node1's groups at once,
    and it is admitted again later; once this livelocked when only one group lost it. node0
    commits every step, in order; both end identical.
    drop: the coordinator's straggler policy (straggler_timeout_ms 1000) drops node1 from the
    barrier node0 waits at, so node0 commits a step alone (one contributor) while node1 is frozen,
    and node1 is admitted again after it resumes."""
    monkeypatch.setenv("WCCL_OP_TIMEOUT_MS", "1500")
    if policy == "drop":
        monkeypatch.setenv("WCCL_STRAGGLER_TIMEOUT_MS", "1000")  # read by the coordinator local_run starts
    # Long enough that node0, alone at about 0.15 s a step once node1 is dropped, is still training
    # when node1 resumes: with 12 steps it finished 0.2 s before, now and then (also at 0faabe4),
    # and the last step then had one contributor.
    steps = 30
    summary, records = run_job(tmp_path, "--nodes", "2", "--local-ranks", "2", "--tls", "off", "--freeze",
                               "node1@2:4", "--", "--outer-steps", str(steps), "--inner-steps", "3", *MODEL,
                               timeout=300)
    nodes = summary["nodes"]
    assert summary["identical"] and [f["fault"] for f in summary["faults"]] == ["freeze", "resume"]
    assert nodes["node0"]["steps"] == list(range(1, steps + 1)), nodes["node0"]["steps"]
    contributors = [r["contributors"] for r in records["node0"] if r["event"] == "step"]
    assert contributors[:2] == [2, 2] and contributors[-1] == 2 and min(contributors) >= 1, contributors
    if policy == "drop":
        assert 1 in contributors, contributors


@pytest.mark.parametrize("seed,streaming", [(1, []), (2, []), (3, ["--fragments", "2", "--overlap", "2"])],
                         ids=["1", "2", "3-streaming"])
def test_a_node_sigkilled_from_outside_at_a_random_point(tmp_path, seed, streaming):
    """Every process of node1 (torchrun and its workers) is SIGKILLed from outside at a point of
    step 3 drawn from the seed: in its inner steps, its all-reduce or its outer step (streaming:
    of sync 3, in the inner steps that overlap an all-reduce, too). The two survivors end
    identical, each logging every step once, in order."""
    offset = random.Random(seed).uniform(0.0, 1.5)
    steps = 6
    summary, records = run_job(tmp_path, "--nodes", "3", "--local-ranks", "2", "--tls", "off",
                               "--sigkill", f"node1@2+{offset:.3f}",
                               "--", "--outer-steps", str(steps // (2 if streaming else 1)), "--inner-steps", "4",
                               *streaming, *MODEL)
    nodes = summary["nodes"]
    assert summary["identical"] and nodes["node1"]["exit"] == -signal.SIGKILL, (seed, offset)
    assert nodes["node0"]["steps"] == nodes["node2"]["steps"] == list(range(1, steps + 1)), (seed, offset)
    assert [f["fault"] for f in summary["faults"]] == ["sigkill"]
    assert all(r["contributors"] in (2, 3) for r in records["node0"] if r["event"] == "step")


def test_recovery_script_measures_a_kill(tmp_path):
    """examples/diloco/recovery.py (docs/trainer.md's recovery table), its kill scenario on a short job."""
    out = tmp_path / "recovery"
    proc = subprocess.run([sys.executable, str(LOCAL_RUN.parent / "recovery.py"), "--out", str(out), "--only", "sigkill",
                           "--", "--outer-steps", "6", "--inner-steps", "4", *MODEL],
                          env=job_env(), capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (row,) = json.loads((out / "recovery.json").read_text())
    assert row["fault"] == "sigkill" and row["identical"] and 0 < row["to_next_step_s"] < 60 and row["step"] >= 4
