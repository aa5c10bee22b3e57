"""CUDA tensors through the library's device path (lib/gpu), against the same operations on CPU
tensors: every collective, wire, algorithm and dtype must give the same bits either way, since the
GPU kernels compute the CPU kernels' bits (docs/algorithms.md, "Device buffers"). Members are
threads of this process sharing one GPU. Skipped without torch or a CUDA device; scripts/gpu-check.sh
runs this file on a GPU machine."""

import pytest

import wccl

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs torch with a CUDA device")

N = 3  # members
SIZES = [1, 4099, (1 << 20) + 7]  # one element, a ragged few blocks, several MiB through the ring


def inputs(rank, count, dtype, case):
    """The same pseudo-random values on every call for (rank, count, case), on the CPU."""
    g = torch.Generator().manual_seed(1000 * rank + 7 * count + case)
    return (torch.rand(count, generator=g) * 4 - 2).to(dtype)


def both(comm, count, dtype, case, run):
    """run(tensor) on a CPU tensor and on a CUDA copy of it; returns (cpu result, cuda result on the CPU)."""
    host = inputs(comm.rank, count, dtype, case)
    dev = host.cuda()
    run(host)
    run(dev)
    return host, dev.cpu()


def assert_same_bits(results):
    for rank, (host, dev) in enumerate(results):
        assert torch.equal(host.view(-1).view(torch.uint8), dev.view(-1).view(torch.uint8)), f"member {rank}"
        assert torch.equal(host.view(torch.uint8), results[0][0].view(torch.uint8)), f"member {rank} differs from 0"


@pytest.mark.parametrize("count", SIZES)
@pytest.mark.parametrize("wire,algo", [(w, a) for w in wccl.Wire for a in (wccl.Algo.RING, wccl.Algo.TREE, wccl.Algo.ALLGATHER)
                                       if w != wccl.Wire.TOPK or a == wccl.Algo.ALLGATHER])  # TOPK: never re-encoded
def test_allreduce_f32_every_wire_matches_the_cpu(members, wire, algo, count):
    def fn(comm):
        out = []
        for case, op in enumerate([wccl.ReduceOp.SUM, wccl.ReduceOp.AVG]):
            out.append(both(comm, count, torch.float32, case, lambda t: comm.allreduce(t, op, wire=wire, algo=algo)))
        return out

    per_member = members(N, fn)
    for case in range(2):
        assert_same_bits([m[case] for m in per_member])
    if wire == wccl.Wire.NATIVE:  # a sum of exactly representable inputs is exact
        want = sum(inputs(r, count, torch.float32, 0).double() for r in range(N))
        assert torch.allclose(per_member[0][0][0].double(), want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64, torch.int32])
@pytest.mark.parametrize("op", [wccl.ReduceOp.SUM, wccl.ReduceOp.AVG, wccl.ReduceOp.MIN, wccl.ReduceOp.MAX,
                                wccl.ReduceOp.PROD])
def test_allreduce_other_dtypes_and_ops_match_the_cpu(members, dtype, op):
    def fn(comm):
        return [both(comm, count, dtype, 3, lambda t: comm.allreduce(t, op)) for count in SIZES[:2]]

    per_member = members(N, fn)
    for i in range(2):
        assert_same_bits([m[i] for m in per_member])


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("wire", [wccl.Wire.INT8, wccl.Wire.INT4, wccl.Wire.INT2, wccl.Wire.FP8, wccl.Wire.TOPK,
                                  wccl.Wire.BF16])
def test_half_data_on_coded_wires_match_the_cpu(members, dtype, wire):
    """F16 and BF16 CUDA tensors on the coded wires: widened and rounded back by the GPU, the same
    bits as CPU tensors."""
    def fn(comm):
        return [both(comm, count, dtype, 4, lambda t: comm.allreduce(t, wccl.ReduceOp.AVG, wire=wire))
                for count in SIZES]

    per_member = members(N, fn)
    for i in range(len(SIZES)):
        assert_same_bits([m[i] for m in per_member])


def test_broadcast_allgather_reduce_scatter_match_the_cpu(members):
    count = 5000

    def fn(comm):
        r = comm.rank
        out = {}
        for wire in (wccl.Wire.NATIVE, wccl.Wire.INT8):
            out[f"broadcast {wire.name}"] = both(comm, count, torch.float32, 4,
                                                lambda t: comm.broadcast(t, root=N - 1, wire=wire))
            g_host = torch.empty(count * N)
            comm.allgather(inputs(r, count, torch.float32, 5), g_host, wire=wire)
            g_dev = torch.empty(count * N).cuda()
            comm.allgather(inputs(r, count, torch.float32, 5).cuda(), g_dev, wire=wire)
            out[f"allgather {wire.name}"] = (g_host, g_dev.cpu())
            rs_host = torch.empty(count)
            comm.reduce_scatter(inputs(r, count * N, torch.float32, 6), rs_host, wire=wire)
            rs_dev = torch.empty(count).cuda()
            comm.reduce_scatter(inputs(r, count * N, torch.float32, 6).cuda(), rs_dev, wire=wire)
            out[f"reduce_scatter {wire.name}"] = (rs_host, rs_dev.cpu())
        return out

    per_member = members(N, fn)
    for key in per_member[0]:
        for rank, m in enumerate(per_member):
            host, dev = m[key]
            assert torch.equal(host.view(torch.uint8), dev.view(torch.uint8)), f"{key}, member {rank}"
        if not key.startswith("reduce_scatter"):  # reduce_scatter's blocks differ by rank
            assert all(torch.equal(m[key][0], per_member[0][key][0]) for m in per_member), key


def test_mixed_host_and_device_members_agree(members):
    """Member 0 passes CUDA tensors, the others CPU tensors, in the same operations."""

    def fn(comm):
        t = inputs(comm.rank, SIZES[2], torch.float32, 7)
        if comm.rank == 0:
            t = t.cuda()
        comm.allreduce(t, wire=wccl.Wire.INT8)
        return t.cpu()

    results = members(N, fn)
    for rank, t in enumerate(results):
        assert torch.equal(t.view(torch.uint8), results[0].view(torch.uint8)), f"member {rank}"


def test_ordered_after_the_callers_stream(members):
    """The collective reads its input only after the work the caller queued on its current stream
    (here a side stream of its own) and before it, nothing: a long kernel writes the input."""

    def fn(comm):
        stream = torch.cuda.Stream()
        with torch.cuda.stream(stream):
            t = torch.zeros(1 << 22, device="cuda")
            torch.cuda._sleep(50_000_000)  # tens of milliseconds of GPU time before the write
            t.fill_(comm.rank + 1.0)
            req = comm.allreduce(t, async_op=True, wire=wccl.Wire.INT8)
        req.wait()
        torch.cuda.synchronize()
        return t.cpu()

    for t in members(2, fn):
        assert torch.equal(t, torch.full((1 << 22,), 3.0))


@pytest.mark.parametrize("wire", list(wccl.Wire))
def test_wire_roundtrip_on_the_gpu_is_the_cpus(wire):
    """Error feedback on CUDA tensors: the GPU's roundtrip is the CPU's bit for bit, out of place
    (after a side stream's pending write) and in place; a NaN on a block wire leaves out as it was."""
    x = inputs(0, (1 << 16) + 3, torch.float32, 5) * 1e-3
    want = wccl.wire_roundtrip(x.clone(), wire)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        dev = torch.zeros_like(x, device="cuda")
        torch.cuda._sleep(20_000_000)  # the input is written only after some GPU time
        dev.copy_(x)
        out = torch.full_like(dev, 7.0)
        assert wccl.wire_roundtrip(dev, wire, out=out) is out
        assert torch.equal(out.cpu().view(torch.uint8), want.view(torch.uint8))
        wccl.wire_roundtrip(dev, wire)
        assert torch.equal(dev.cpu().view(torch.uint8), want.view(torch.uint8))
    if wire in (wccl.Wire.INT8, wccl.Wire.INT4, wccl.Wire.INT2, wccl.Wire.FP8, wccl.Wire.TOPK):
        bad = x.cuda()
        bad[1234] = float("nan")
        before = out.clone()
        with pytest.raises(wccl.InvalidArgumentError, match="element 1234 is NaN"):
            wccl.wire_roundtrip(bad, wire, out=out)
        assert torch.equal(out, before)


def test_cuda_tensors_in_sync_state(members):
    def fn(comm):
        w = torch.arange(100000, dtype=torch.float32, device="cuda") * (comm.rank == 0)
        stats = comm.sync_state({"w": w}, revision=5 if comm.rank == 0 else 0)
        return stats.revision, w.cpu()

    for revision, w in members(2, fn):
        assert revision == 5 and torch.equal(w, torch.arange(100000, dtype=torch.float32))


def test_torch_distributed_backend_on_cuda_tensors(tmp_path):
    """The torch.distributed backend "wccl" on CUDA tensors: two ranks (processes) on this GPU run
    torch_backend_worker.py's "cuda" scenario (every collective against the CPU's result)."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    worker = Path(__file__).with_name("torch_backend_worker.py")
    env = dict(os.environ, WCCL_TLS="off", WCCL_LOG_LEVEL="error")
    procs = [subprocess.Popen([sys.executable, str(worker), "cuda", str(tmp_path / "store"), str(r), "2"], env=env,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(2)]
    for rank, p in enumerate(procs):
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, f"rank {rank}: {err[-3000:]}"
        assert json.loads(out.splitlines()[-1]) == {"rank": rank, "ok": True}
