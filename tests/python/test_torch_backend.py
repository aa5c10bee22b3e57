"""The torch.distributed backend "wccl" (wccl.torch): every collective against its exact answer, DDP
and FSDP2's HSDP against the gloo backend, and a rank SIGKILLed mid-training. Each rank is a
process running torch_backend_worker.py, configured through WCCL_* as a user's job would be."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
WORKER = Path(__file__).with_name("torch_backend_worker.py")


def tls_env(pki):
    return {f"WCCL_{k.upper()}": v for k, v in pki.items()}  # tls_cert, tls_key, tls_ca


class Job:
    """n ranks of one scenario; ``results()`` waits for them and returns each rank's JSON lines."""

    def __init__(self, scenario, n, tmp_path, env, backend="wccl", delays=None):
        self.procs, self.logs = [], []
        base = dict(os.environ, WCCL_LOG_LEVEL="error", **env)
        store = tmp_path / f"store-{scenario}-{backend}"
        order = sorted(range(n), key=lambda r: (delays or {}).get(r, 0.0))
        start = time.monotonic()
        procs = {}
        for rank in order:
            time.sleep(max(0.0, start + (delays or {}).get(rank, 0.0) - time.monotonic()))
            log = open(tmp_path / f"{scenario}-{backend}-{rank}.log", "w")
            procs[rank] = (subprocess.Popen([sys.executable, str(WORKER), scenario, str(store), str(rank), str(n), backend],
                                            env=base, stdout=subprocess.PIPE, stderr=log, text=True), log)
        self.procs = [procs[r][0] for r in range(n)]
        self.logs = [procs[r][1] for r in range(n)]

    def line(self, rank, timeout=60.0):
        """The next JSON line of ``rank`` (the worker prints few, so a blocking read is bounded by it)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.procs[rank].stdout.readline()
            if text:
                return json.loads(text)
            if self.procs[rank].poll() is not None:
                break
        raise AssertionError(f"rank {rank} printed nothing more (exit {self.procs[rank].poll()}): {self.stderr(rank)}")

    def stderr(self, rank):
        self.logs[rank].flush()
        return Path(self.logs[rank].name).read_text()[-3000:]

    def results(self, timeout=120.0):
        out = []
        for rank, p in enumerate(self.procs):
            try:
                text, _ = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
                raise AssertionError(f"rank {rank} hangs: {self.stderr(rank)}")
            assert p.returncode == 0, f"rank {rank} exited {p.returncode}: {self.stderr(rank)}"
            out.append([json.loads(x) for x in text.splitlines() if x.startswith("{")])
        return out

    def kill(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()


@pytest.fixture
def jobs():
    started = []

    def start(*args, **kwargs):
        started.append(Job(*args, **kwargs))
        return started[-1]

    yield start
    for job in started:
        job.kill()
        for log in job.logs:
            log.close()


def test_every_collective_over_tls_with_the_coordinator_in_rank_0(jobs, tmp_path, pki):
    """init_process_group("wccl") with nothing but the job's TLS files in the environment: rank 0
    runs the coordinator and publishes it in the store. all_reduce (five ops, float and int,
    strided), async Work and futures, broadcast from every root, all_gather (list and single),
    reduce_scatter (list and single), all_reduce_coalesced, barrier, all_gather_object, a subgroup,
    an INT8 group whose result is bit-identical on every rank, and a paced group
    (Options.max_link_rate) whose all-reduce takes the time its rate allows."""
    results = jobs("collectives", 4, tmp_path, tls_env(pki)).results()
    for rank, lines in enumerate(results):
        assert {"rank": rank, "ok": True} == {k: v for k, v in lines[-1].items() if k != "wccl_order"}
        assert sorted(lines[-1]["wccl_order"]) == [0, 1, 2, 3]


def test_ranks_in_another_order_than_wccls_and_joining_one_by_one(jobs, tmp_path, pki, coordinators):
    """An external coordinator (WCCL_COORDINATOR) ordering its ring by arrival, and ranks started
    in reverse order 0.4 s apart: the first epochs hold some ranks only (the group waits for all
    with updates), and wccl's ranks are torch's reversed, so broadcast roots, all_gather's order
    and reduce_scatter's blocks go through the permutation."""
    coord = coordinators(order_ring_by_rtt="off")
    env = dict(tls_env(pki), WCCL_COORDINATOR=f"127.0.0.1:{coord.port}")
    results = jobs("collectives", 4, tmp_path, env, delays={3: 0.0, 2: 0.4, 1: 0.8, 0: 1.2}).results()
    orders = {tuple(lines[-1]["wccl_order"]) for lines in results}
    assert len(orders) == 1
    assert orders.pop() != (0, 1, 2, 3), "the case this test exists for: wccl's ranks differ from torch's"
    for lines in results:
        assert lines[-1]["ok"]


def test_ddp_buckets_that_differ_fail_on_every_rank(jobs, tmp_path):
    """docs/fault-tolerance.md, "Calls that differ": DDP with torch's fp16 compression hook on rank 2
    only all-reduces its buckets as float16 there and float32 elsewhere; every rank fails with
    wccl's MismatchError naming the dtype, promptly, instead of training on diverged replicas. Before it,
    a broadcast root outside the group and an unsupported reduce op raise ValueError naming them."""
    start = time.monotonic()
    results = jobs("mistakes", 3, tmp_path, {"WCCL_TLS": "off"}).results()
    assert time.monotonic() - start < 50, "well under the group's 60 s timeout"
    for rank, lines in enumerate(results):
        last = lines[-1]
        assert last["rank"] == rank and last["error"] is not None, last
        assert "MismatchError" in last["error"] + last["text"] and "calls differ in dtype" in last["text"], last


@pytest.mark.parametrize("mode", ["ddp", "hsdp"])
def test_training_matches_gloo(jobs, tmp_path, mode):
    """DDP (several buckets), and FSDP2's HSDP on a 2x2 mesh with the replicate dimension over wccl
    and the shard dimension over gloo: the same losses as the same job on gloo alone."""
    env = {"WCCL_TLS": "off"}
    ours = jobs(mode, 4, tmp_path, env, backend="wccl").results()
    gloo = jobs(mode, 4, tmp_path, env, backend="gloo").results()
    for rank in range(4):
        a, b = ours[rank][-1]["losses"], gloo[rank][-1]["losses"]
        assert len(a) == 8
        assert a == pytest.approx(b, rel=1e-5), f"rank {rank}"
    assert ours[0][-1]["losses"][-1] < ours[0][-1]["losses"][0] * 1.5  # it trained, not diverged


@pytest.mark.parametrize("fault", ["kill", "freeze"])
def test_a_lost_rank_fails_the_group_naming_it(jobs, tmp_path, pki, fault):
    """Three ranks all-reducing in a loop; rank 2's process is SIGKILLed, or SIGSTOPped past
    peer_timeout_ms and then resumed. The others' all_reduce raises PeerLostError naming rank2, the
    tensor as it was, and the next call on the group says it failed earlier; a resumed rank 2 hears
    the same."""
    env = dict(tls_env(pki), WCCL_HEARTBEAT_MS="200", WCCL_PEER_TIMEOUT_MS="2000")
    job = jobs("survive", 3, tmp_path, env)
    for rank in range(3):
        assert job.line(rank, 60).get("init_s") is not None
        assert job.line(rank, 60) == {"rank": rank, "ready": True}
    time.sleep(1.0)
    job.procs[2].send_signal(signal.SIGKILL if fault == "kill" else signal.SIGSTOP)
    for rank in (0, 1):
        lost = job.line(rank, 30)
        assert "rank2" in lost["lost"] and lost["step"] > 0, lost
        after = job.line(rank, 30)["after"]
        assert "failed earlier" in after and "rank2" in after, after
    if fault == "freeze":
        job.procs[2].send_signal(signal.SIGCONT)
        lost = job.line(2, 30)
        assert "PEER_LOST" in lost["lost"], lost
        assert "failed earlier" in job.line(2, 30)["after"]
    for rank in (0, 1) if fault == "kill" else (0, 1, 2):
        assert job.procs[rank].wait(30) == 0, job.stderr(rank)


def test_wait_returns_once_the_future_has_completed():
    """As with gloo, a Work's wait() returns only after its future completed and ran its callbacks,
    whichever thread completes it: torchft chains callbacks onto the future right after wait() and
    asserted (a failed commit) when the group's completion thread completed the future later."""
    import threading

    import torch
    from wccl._torch_backend import _Work

    work = _Work(None, [torch.ones(2)], None, lambda e: None)
    in_callback, release = threading.Event(), threading.Event()

    def callback(fut):
        in_callback.set()
        release.wait(10)
        return fut.value()

    chained = work.get_future().then(callback)
    completer = threading.Thread(target=work._complete)
    completer.start()
    assert in_callback.wait(10)
    waited = []
    waiter = threading.Thread(target=lambda: waited.append(work.wait()))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not work.is_completed(), "wait() returned while the future's callbacks ran"
    release.set()
    waiter.join(10)
    completer.join(10)
    assert waited == [True] and work.get_future().done() and chained.done() and work.is_completed()
    # A callback that waits on its own work (on the completing thread) does not deadlock.
    again = _Work(None, [torch.ones(1)], None, lambda e: None)
    inner = again.get_future().then(lambda fut: again.wait())
    again._complete()
    assert inner.value() is True


def test_pg_options_of_another_type_are_refused():
    import torch.distributed as dist
    import wccl.torch  # noqa: F401 (registers the backend)
    from wccl._torch_backend import create

    assert "wccl" in dist.Backend.backend_list
    with pytest.raises(TypeError, match="wccl.torch.Options"):
        create(None, object())
    assert wccl.torch.Options().wire == wccl.Wire.NATIVE
    assert wccl.torch.Options(max_link_rate=wccl.MIN_LINK_RATE).max_link_rate == wccl.MIN_LINK_RATE
    for rate in (wccl.MIN_LINK_RATE - 1, -1, 2**63):
        with pytest.raises(ValueError, match="max_link_rate"):
            wccl.torch.Options(max_link_rate=rate)
    for rate in (1.5e6, None, "1000000"):
        with pytest.raises(TypeError):
            wccl.torch.Options(max_link_rate=rate)


def test_the_groups_wire_goes_where_the_library_says():
    """Options are checked by the library as the group's float SUM all-reduces take them, and each
    operation gets the group's wire where wccl_opts_for applies it (SUM and AVG reductions of the
    floats it carries; TOPK: all-reduces only), NATIVE elsewhere."""
    from types import SimpleNamespace

    import torch
    import wccl
    from wccl._core import Collective, ReduceOp
    from wccl._torch_backend import Options, ProcessGroupWccl

    with pytest.raises(wccl.InvalidArgumentError, match="only the TOPK wire keeps elements"):
        Options(wire=wccl.Wire.INT8, topk_keep=3)
    with pytest.raises(wccl.InvalidArgumentError, match="topk_keep 65 is not 1..64"):
        Options(wire=wccl.Wire.TOPK, topk_keep=65)
    with pytest.raises(wccl.InvalidArgumentError, match="the topk wire is never re-encoded"):
        Options(wire=wccl.Wire.TOPK, algo=wccl.Algo.RING)
    with pytest.raises(wccl.InvalidArgumentError, match=f"at least {wccl.MIN_LINK_RATE} bytes per second"):
        Options(max_link_rate=wccl.MIN_LINK_RATE - 1)

    def wire(options, coll, op=ReduceOp.SUM, dtype=torch.float32):
        group = SimpleNamespace(_opts_for={}, _options=options, _timeout=5.0)
        opts = ProcessGroupWccl._opts(group, coll, op, dtype)
        assert opts["timeout"] == 5.0 and opts["algo"] == options.algo
        return opts["wire"], opts["topk_keep"]

    int8 = Options(wire=wccl.Wire.INT8)
    for coll in (Collective.ALLREDUCE, Collective.REDUCE_SCATTER):
        for dtype in (torch.float32, torch.float16, torch.bfloat16):
            for op in (ReduceOp.SUM, ReduceOp.AVG):
                assert wire(int8, coll, op, dtype) == (wccl.Wire.INT8, 0)
            for op in (ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PROD):
                assert wire(int8, coll, op, dtype) == (wccl.Wire.NATIVE, 0)
        for dtype in (torch.float64, torch.int32, torch.int64, torch.uint8, torch.complex64):
            assert wire(int8, coll, ReduceOp.SUM, dtype) == (wccl.Wire.NATIVE, 0)
    for coll in (Collective.BROADCAST, Collective.ALLGATHER, Collective.BARRIER):
        assert wire(int8, coll) == (wccl.Wire.NATIVE, 0)
    topk = Options(wire=wccl.Wire.TOPK, topk_keep=3)
    assert wire(topk, Collective.ALLREDUCE, ReduceOp.AVG) == (wccl.Wire.TOPK, 3)
    assert wire(topk, Collective.REDUCE_SCATTER) == (wccl.Wire.NATIVE, 0)


def test_the_overhead_benchmark_runs():
    """bench/torch/backend_overhead.py as docs/perf.md runs it, on small sizes: one row per size."""
    bench = Path(__file__).resolve().parents[2] / "bench" / "torch" / "backend_overhead.py"
    out = subprocess.run([sys.executable, str(bench), "--ranks", "2", "--sizes", "64K,1M", "--reps", "2"],
                         capture_output=True, text=True, timeout=120, env=dict(os.environ, WCCL_TLS="off"))
    assert out.returncode == 0, out.stderr[-3000:]
    rows = [line for line in out.stdout.splitlines() if line.startswith("| ") and "iB |" in line]
    assert len(rows) == 2 and all(float(r.split("|")[4]) > 0 for r in rows), out.stdout
