"""One rank of a torch.distributed job on backend "wccl" (test_torch_backend.py starts them):
``torch_backend_worker.py SCENARIO STORE_FILE RANK WORLD_SIZE [BACKEND]``. It prints one JSON line
per result and exits 0 when every check it makes passed. wccl configuration comes from WCCL_*."""

import json
import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

import wccl
import wccl.torch


# torch 2.13's names, and the older ones (the GPU machine's torch may be older)
all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def say(**kv):
    print(json.dumps(kv), flush=True)


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def collectives(rank, n):
    """Every collective of the backend against its exact answer, computed here."""
    pg = dist.group.WORLD
    check(pg.name() == "wccl" and dist.get_backend() == "wccl", f"backend {pg.name()}")
    base = [torch.arange(6, dtype=torch.float32) + 10 * r for r in range(n)]
    for op, expect in [(dist.ReduceOp.SUM, sum(base)), (dist.ReduceOp.AVG, sum(base) / n),
                       (dist.ReduceOp.MIN, base[0]), (dist.ReduceOp.MAX, base[-1]),
                       (dist.ReduceOp.PRODUCT, torch.stack(base).prod(0))]:
        t = base[rank].clone()
        dist.all_reduce(t, op=op)
        check(torch.equal(t, expect), f"all_reduce {op}: {t} != {expect}")
    ints = torch.tensor([rank + 1, -rank], dtype=torch.int64)
    dist.all_reduce(ints)
    check(ints.tolist() == [n * (n + 1) // 2, -n * (n - 1) // 2], f"int64 all_reduce {ints}")

    # async: a Work, its future, in-order completion of several in flight
    ts = [torch.full((1000,), float(rank + i)) for i in range(8)]
    works = [dist.all_reduce(t, async_op=True) for t in ts]
    fut = works[-1].get_future()
    check(fut.wait()[0] is ts[-1] or torch.equal(fut.wait()[0], ts[-1]), "future's value is the tensor")
    for i, w in enumerate(works):
        w.wait()
        check(torch.equal(ts[i], torch.full((1000,), float(sum(r + i for r in range(n))))), f"async {i}")
        check(w.is_completed() and w.is_success(), "work completed")

    # a non-contiguous tensor is reduced in place
    m = torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * (rank + 1)
    dist.all_reduce(m)
    check(torch.equal(m, torch.arange(12, dtype=torch.float32).reshape(3, 4).t() * (n * (n + 1) // 2)), "strided")

    for root in range(n):
        b = torch.full((5,), float(rank)) if rank == root else torch.zeros(5)
        dist.broadcast(b, src=root)
        check(torch.equal(b, torch.full((5,), float(root))), f"broadcast from {root}: {b}")

    mine = torch.tensor([rank, rank * 100], dtype=torch.float32)
    outs = [torch.empty(2) for _ in range(n)]
    dist.all_gather(outs, mine)
    check([o.tolist() for o in outs] == [[r, r * 100] for r in range(n)], f"all_gather {outs}")
    flat = torch.empty(2 * n)
    all_gather_single(flat, mine)
    check(flat.tolist() == [v for r in range(n) for v in (r, r * 100)], f"all_gather_single {flat}")

    full = torch.arange(3 * n, dtype=torch.float32) * (rank + 1)
    out = torch.empty(3)
    reduce_scatter_single(out, full)
    tri = n * (n + 1) // 2
    check(out.tolist() == [float(v * tri) for v in range(3 * rank, 3 * rank + 3)], f"reduce_scatter_single {out}")
    out2 = torch.empty(3)
    dist.reduce_scatter(out2, list(full.chunk(n)))
    check(torch.equal(out, out2), f"reduce_scatter {out2}")

    a, b = torch.ones(3) * rank, torch.ones(2, 2) * rank
    dist.all_reduce_coalesced([a, b])
    check(torch.equal(a, torch.full((3,), float(n * (n - 1) // 2))) and torch.equal(b, torch.full((2, 2), float(n * (n - 1) // 2))),
          "all_reduce_coalesced")
    dist.barrier()

    objs = [None] * n
    dist.all_gather_object(objs, {"rank": rank})
    check(objs == [{"rank": r} for r in range(n)], f"all_gather_object {objs}")

    # a subgroup of the last n-1 ranks, and an INT8 group: results identical on every member
    sub = dist.new_group(list(range(1, n)), backend="wccl")
    int8 = dist.new_group(backend="wccl", pg_options=wccl.torch.Options(wire=wccl.Wire.INT8))
    if rank >= 1:
        s = torch.ones(4) * rank
        dist.all_reduce(s, group=sub)
        check(torch.equal(s, torch.full((4,), float(sum(range(1, n))))), f"subgroup {s}")
    g = torch.Generator().manual_seed(rank)
    x = torch.randn(4096, generator=g)
    exact = x.clone()
    dist.all_reduce(exact)
    dist.all_reduce(x, group=int8)
    check((x - exact).abs().max().item() < 0.05 * exact.abs().max().item(), "INT8 close to the exact sum")
    gathered = [torch.empty_like(x) for _ in range(n)]
    dist.all_gather(gathered, x)
    check(all(torch.equal(g, gathered[0]) for g in gathered), "INT8 result bit-identical on every rank")
    # the group's wire is for SUM and AVG (the library's wccl_opts_for): a MAX travels NATIVE, exact
    top = torch.randn(4096, generator=torch.Generator().manual_seed(100 + rank))
    exact_top = top.clone()
    dist.all_reduce(top, op=dist.ReduceOp.MAX, group=int8)
    dist.all_reduce(exact_top, op=dist.ReduceOp.MAX)
    check(torch.equal(top, exact_top), "the INT8 group's MAX is exact")
    # a TOPK group keeping 3 of each block of 256: all-reduces are the sum of each rank's top-k
    # roundtrip at that keep; a reduce-scatter, which the wire would re-encode, travels NATIVE (the
    # keep dropped with the wire: the library refuses a keep on another wire)
    try:
        wccl.torch.Options(wire=wccl.Wire.INT8, topk_keep=3)
        check(False, "Options refuse a topk_keep without the TOPK wire")
    except ValueError:
        pass
    topk = dist.new_group(backend="wccl", pg_options=wccl.torch.Options(wire=wccl.Wire.TOPK, topk_keep=3))
    x = torch.randn(4096, generator=torch.Generator().manual_seed(rank))
    sparse = x.clone()
    dist.all_reduce(sparse, group=topk)
    mine = wccl.wire_roundtrip(x.clone(), wccl.Wire.TOPK, topk_keep=3)
    check(int((mine != 0).sum()) <= 3 * 4096 // 256, "the group's roundtrip keeps 3 of each block")
    kept = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(kept, mine)
    order = topk._torch_rank  # the torch rank of each wccl rank: the order the library sums in
    check(torch.equal(sparse, sum((kept[t] for t in order[1:]), kept[order[0]].clone())),
          "TOPK all-reduce is the sum of the roundtrips in wccl rank order")
    whole = torch.randint(-100, 100, (4096 // n * n,), generator=torch.Generator().manual_seed(rank)).float()
    scattered, exact_share = torch.empty(4096 // n), torch.empty(4096 // n)  # whole numbers: sums exact in any order
    reduce_scatter_single(scattered, whole.clone(), group=topk)
    reduce_scatter_single(exact_share, whole.clone())
    check(torch.equal(scattered, exact_share), "TOPK group's reduce-scatter travels NATIVE")
    # a paced group (the ring pinned: each link carries 2(n-1)/n of the buffer, at no more than
    # max_link_rate). The kernel sends each stream's first packets at once and a stream's last
    # packet ends its transfer without its gap, so on loopback (64 KiB packets, 4 streams) this
    # takes about 0.55 of bytes / rate: a quarter leaves the margin; unpaced it takes milliseconds
    rate = 16 * wccl.MIN_LINK_RATE
    paced = dist.new_group(backend="wccl", pg_options=wccl.torch.Options(max_link_rate=rate, algo=wccl.Algo.RING))
    big = torch.full((1 << 18,), float(rank + 1))
    dist.barrier(group=paced)  # ranks start together (the time is each rank's own)
    start = time.monotonic()
    dist.all_reduce(big, group=paced)
    took = time.monotonic() - start
    check(torch.equal(big, torch.full((1 << 18,), float(n * (n + 1) // 2))), "paced all_reduce")
    check(took >= 0.25 * 2 * (n - 1) / n * big.numel() * 4 / rate, f"paced all_reduce took {took:.3f} s")
    wccl_ranks = pg._torch_rank
    say(rank=rank, ok=True, wccl_order=wccl_ranks)


def cuda(rank, n):
    """The backend on CUDA tensors (every rank on cuda:0 here): each collective against the same
    one on CPU tensors, and an INT8 group whose CUDA result has the CPU result's bits."""
    int8 = dist.new_group(backend="wccl", pg_options=wccl.torch.Options(wire=wccl.Wire.INT8))
    g = torch.Generator().manual_seed(rank)
    host = torch.rand(1 << 20, generator=g) * 4 - 2
    for group in (None, int8):
        a, b = host.clone(), host.cuda()
        dist.all_reduce(a, group=group)
        dist.all_reduce(b, group=group)
        check(torch.equal(a, b.cpu()), "all_reduce on CUDA has the CPU's bits")
    b = host.cuda() if rank == 1 else torch.zeros_like(host, device="cuda")
    dist.broadcast(b, src=1)
    gathered = torch.empty(n * host.numel(), device="cuda")
    all_gather_single(gathered, b)
    check(all(torch.equal(gathered.view(n, -1)[r].cpu(), gathered.view(n, -1)[0].cpu()) for r in range(n)),
          "broadcast then all_gather: every block the root's")
    out = torch.empty(host.numel() // n, device="cuda")
    reduce_scatter_single(out, host.cuda(), op=dist.ReduceOp.MAX)
    ref = torch.empty(host.numel() // n)
    reduce_scatter_single(ref, host.clone(), op=dist.ReduceOp.MAX)
    check(torch.equal(out.cpu(), ref), "reduce_scatter on CUDA")
    works = [dist.all_reduce(torch.ones(1000, device="cuda") * i, async_op=True) for i in range(4)]
    for i, w in enumerate(works):
        w.wait()
        check(torch.equal(w.get_future().wait()[0].cpu(), torch.full((1000,), float(n * i))), f"async {i}")
    say(rank=rank, ok=True)


def train(rank, n, backend, mode):
    """A small MLP trained with DDP or FSDP2's HSDP; prints the loss of every step."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    if mode == "ddp":
        model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.001)  # several buckets
    else:
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard
        override = {"replicate": "wccl"} if backend == "wccl" else None
        mesh = init_device_mesh("cpu", (n // 2, 2), mesh_dim_names=("replicate", "shard"), backend_override=override)
        check(mesh.get_group("replicate").name() == ("wccl" if backend == "wccl" else "gloo"), "replicate backend")
        for layer in model:
            if isinstance(layer, torch.nn.Linear):
                fully_shard(layer, mesh=mesh)
        fully_shard(model, mesh=mesh)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(100 + rank)
    losses = []
    for _ in range(8):
        x = torch.randn(32, 16, generator=g)
        y = x.sum(1, keepdim=True).sin()
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        t = loss.detach().clone()
        dist.all_reduce(t, op=dist.ReduceOp.AVG)  # the job's mean loss
        losses.append(t.item())
    say(rank=rank, losses=losses)


def mistakes(rank, n):
    """A caller's mistakes, named: a broadcast root outside the group, an unsupported reduce op,
    then DDP whose buckets differ on rank 2 (torch's fp16 compression hook there only: its buckets
    are all-reduced as float16, the others' as float32, of the same element count), which must fail
    on every rank with wccl's MismatchError, not train on with replicas that differ."""
    t = torch.ones(4)
    for call, want in [(lambda: dist.broadcast(t, src=n + 2), f"in a group of {n}"),
                       (lambda: dist.all_reduce(t, op=dist.ReduceOp.BAND), "reduce op BAND is not supported")]:
        try:
            call()
            check(False, f"{want}: no error")
        except ValueError as e:
            check(want in str(e), f"{want!r} not in {e!r}")
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    model = torch.nn.parallel.DistributedDataParallel(model)
    if rank == 2:
        from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
        model.register_comm_hook(None, default_hooks.fp16_compress_hook)
    x = torch.randn(32, 16)
    try:
        torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True)).backward()
        say(rank=rank, error=None)
    except Exception as e:  # noqa: BLE001 (reported, and judged by the test)
        say(rank=rank, error=type(e).__name__, text=str(e))


def survive(rank, n):
    """All-reduces until the group fails; reports the error, then what the next call raises."""
    say(rank=rank, ready=True)
    t = torch.ones(1 << 16)
    i = 0
    try:
        while True:
            before = t.clone()
            try:
                dist.all_reduce(t)
            except wccl.PeerLostError as e:
                check(torch.equal(t, before), "a failed all-reduce leaves its tensor as it was")
                say(rank=rank, lost=str(e), step=i)
                break
            t.fill_(1.0)
            i += 1
        try:
            dist.all_reduce(t)
            say(rank=rank, after="ok")
        except wccl.WcclError as e:
            say(rank=rank, after=str(e))
    finally:
        sys.stdout.flush()


def main():
    scenario, store, rank, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    backend = sys.argv[5] if len(sys.argv) > 5 else "wccl"
    pg_backend = "gloo" if scenario == "hsdp" else backend
    start = time.monotonic()
    dist.init_process_group(pg_backend, init_method=f"file://{store}", rank=rank, world_size=n,
                            timeout=timedelta(seconds=60))
    say(rank=rank, init_s=round(time.monotonic() - start, 3))
    if scenario == "collectives":
        collectives(rank, n)
    elif scenario == "cuda":
        cuda(rank, n)
    elif scenario in ("ddp", "hsdp"):
        train(rank, n, backend, scenario)
    elif scenario == "survive":
        survive(rank, n)
    elif scenario == "mistakes":
        mistakes(rank, n)
        sys.stdout.flush()
        os._exit(0)  # the group failed: its leave would wait for nothing
    dist.destroy_process_group()
    if pg_backend == "gloo":
        # torch's gloo worker threads can still hold work with tensors when the interpreter is torn
        # down, which aborts the process now and then ("terminate called without an active
        # exception", seen once in a few runs of the gloo jobs; pytorch/pytorch#179291 describes
        # it). Every result is printed by now: end here. wccl's own teardown is still exercised by
        # the jobs on the wccl backend alone.
        sys.stdout.flush()
        os._exit(0)


if __name__ == "__main__":
    main()
