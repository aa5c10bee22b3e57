"""The Pythonic layer in one process: members on threads, every collective on numpy arrays and torch
tensors, requests, and the errors a caller meets."""

import threading
import time

import numpy as np
import pytest

import wccl

try:
    import torch
except ImportError:  # torch is optional: its tests skip
    torch = None

needs_torch = pytest.mark.skipif(torch is None, reason="torch is not installed")


def test_every_collective_on_numpy(members):
    def fn(comm):
        r, n = comm.rank, comm.size
        x = np.arange(6, dtype=np.float64) + r
        summed = x.copy()
        comm.allreduce(summed)
        into = np.empty(6, np.float64)
        comm.allreduce(x, wccl.ReduceOp.MAX, out=into)
        b = np.full(4, r, np.int32)
        comm.broadcast(b, root=n - 1)
        gathered = np.empty(3 * n, np.int64)
        comm.allgather(np.full(3, r, np.int64), gathered)
        block = np.empty(2, np.float32)
        comm.reduce_scatter(np.arange(2 * n, dtype=np.float32) * (r + 1), block)
        comm.barrier()
        return summed, into, b, gathered, block, x, comm.stats(), comm.links()

    n = 3
    for r, (summed, into, b, gathered, block, x, stats, links) in enumerate(members(n, fn)):
        # Six operations committed in the one epoch; each member links to both others (its ring
        # neighbours), measured by what they carried.
        assert (stats.ops_committed, stats.ops_failed, stats.epochs, stats.updates) == (6, 0, 1, 0), stats
        assert stats.bytes_sent >= 6 * 8 and stats.bytes_received >= 6 * 8, stats
        assert [link.rank for link in links] == [k for k in range(n) if k != r], links
        assert all(link.rtt_us > 0 for link in links), links
        np.testing.assert_array_equal(summed, np.arange(6) * n + sum(range(n)))
        np.testing.assert_array_equal(into, np.arange(6) + n - 1)
        np.testing.assert_array_equal(b, [n - 1] * 4)
        np.testing.assert_array_equal(gathered, np.repeat(np.arange(n), 3))
        np.testing.assert_array_equal(block, np.arange(2 * r, 2 * r + 2) * sum(range(1, n + 1)))
        np.testing.assert_array_equal(x, np.arange(6) + r), "out= leaves the input alone"


@needs_torch
def test_torch_tensors_in_place_and_async(members):
    def fn(comm):
        t = torch.full((2, 3), comm.rank + 1, dtype=torch.bfloat16)
        req = comm.allreduce(t, wccl.ReduceOp.PROD, async_op=True)
        stats = req.wait()
        assert req.done() and req.wait() == stats, "a second wait returns the same outcome"
        reqs = [comm.allreduce(torch.ones(1000, dtype=torch.int64) * (comm.rank + 1), async_op=True)
                for _ in range(4)]
        return t, stats, [q.wait().bytes_sent for q in reqs]

    for t, stats, sent in members(2, fn):
        assert t.dtype == torch.bfloat16 and t.tolist() == [[2.0] * 3] * 2
        assert stats.world_size == 2 and stats.epoch >= 1 and stats.time_us > 0
        assert all(s == 8000 for s in sent)


def test_int8_wire_sends_a_quarter_and_agrees(members):
    def fn(comm):
        x = np.random.default_rng(comm.rank).uniform(-1, 1, 1 << 16).astype(np.float32)
        exact = x.copy()
        native = comm.allreduce(exact)
        coded = comm.allreduce(x, wire=wccl.Wire.INT8)
        return x, exact, native.bytes_sent, coded.bytes_sent

    (a, exact_a, native, coded), (b, _, _, _) = members(2, fn)
    np.testing.assert_array_equal(a, b)  # bit-identical on both members
    assert np.max(np.abs(a - exact_a)) < 2 * 2.0 / 255, "within the INT8 bound for a range of 2 per block"
    assert 0.24 < coded / native < 0.26


@pytest.mark.parametrize("wire,keep", [(wccl.Wire.INT2, 0), (wccl.Wire.TOPK, 0), (wccl.Wire.TOPK, 2),
                                       (wccl.Wire.TOPK, 33)])
def test_int2_and_topk_are_the_sum_of_each_members_roundtrip(members, wire, keep):
    """INT2 and TOPK (at its default keep of 8, and keeping 2 and 33 of each block) under AUTO run
    the all-gather all-reduce: on every member the result is the rank-order sum of what each
    member's contribution decodes to, so error feedback's residual (x - wire_roundtrip(x)) is
    exactly what the sum lacks; it sends (n - 1) wire copies of the input."""
    n, count = 3, (1 << 16) + 5

    def data(rank):
        return (np.random.default_rng(rank).standard_normal(count) * 1e-3).astype(np.float32)

    def fn(comm):
        x = data(comm.rank)
        stats = comm.allreduce(x, wire=wire, topk_keep=keep)
        return x, stats.algo, stats.bytes_sent

    want = np.zeros(count, np.float32)
    for r in range(n):
        want += wccl.wire_roundtrip(data(r), wire, topk_keep=keep)
    if wire == wccl.Wire.INT2:  # blocks of 128: two floats and 2 bits each
        wire_bytes = (count // 128) * 40 + 8 + (count % 128 + 3) // 4
    else:  # blocks of 256: a float, and `keep` kept elements as an index byte and 4 bits each
        kept = keep or 8
        tail = min(kept, count % 256)
        wire_bytes = (count // 256) * (4 + kept + (kept + 1) // 2) + 4 + tail + (tail + 1) // 2
    for x, algo, sent in members(n, fn):
        assert algo == wccl.Algo.ALLGATHER
        np.testing.assert_array_equal(x, want)
        assert sent == (n - 1) * wire_bytes


def test_members_with_different_topk_keeps_fail_together_and_go_on(members):
    """TOPK's keep is part of the operation's call, as the wire is: members that pass different keeps
    fail the call at once with MismatchError, naming the wire, instead of waiting out its timeout
    (or a refused frame blaming a live neighbour, before the call check); after an update they
    all-reduce again."""
    x = np.linspace(-1, 1, 5000, dtype=np.float32)

    def fn(comm):
        start = time.monotonic()
        with pytest.raises(wccl.MismatchError, match="calls differ in wire") as refused:
            comm.allreduce(x.copy(), wire=wccl.Wire.TOPK, topk_keep=2 + comm.rank, timeout=60)
        waited = time.monotonic() - start
        comm.update()
        out = comm.allreduce(x.copy(), wire=wccl.Wire.TOPK, topk_keep=3)
        return "topk/2" in refused.value.detail, waited < 30, out.algo == wccl.Algo.ALLGATHER

    results = members(2, fn)
    assert all(all(r) for r in results), results


# Rank 2's call, and the field every member's MismatchError names; the others all-reduce 8 float32
# elements (sum) in place. (name, field, rank 2's call on its buffer x of 8 float64 elements)
_DIFFERING_CALLS = [
    ("int32 against float32", "dtype", lambda c, x: c.allreduce(x.view(np.int32)[:8])),
    ("max against sum", "reduce op", lambda c, x: c.allreduce(x.view(np.float32)[:8], wccl.ReduceOp.MAX)),
    ("7 elements against 8", "count", lambda c, x: c.allreduce(x.view(np.float32)[:7])),
    ("float64 against float32", "dtype", lambda c, x: c.allreduce(x)),
    ("int8 wire against native", "wire", lambda c, x: c.allreduce(x.view(np.float32)[:8], wire=wccl.Wire.INT8)),
    ("broadcast against allreduce", "collective", lambda c, x: c.broadcast(x.view(np.float32)[:8], root=0)),
]


def test_a_call_that_differs_fails_on_every_member(members):
    """docs/fault-tolerance.md, "Calls that differ": one member's call differs in one field; every
    member gets MismatchError naming the field and rank 2, in well under the operation's timeout, its
    array as it was, and nobody is lost: after update() the same call everywhere succeeds. Before
    the call check, int32 against float32 and max against sum returned OK with results that
    differed, and the other cases blamed a live rank with PeerLostError."""

    def fn(comm):
        seen = []
        for name, field, odd in _DIFFERING_CALLS:
            x = np.zeros(8, np.float64)
            x.view(np.float32)[:] = comm.rank + 1
            before = x.copy()
            start = time.monotonic()
            with pytest.raises(wccl.MismatchError) as failed:
                if comm.rank == 2:
                    odd(comm, x)
                else:
                    comm.allreduce(x.view(np.float32)[:8], timeout=60)
            waited = time.monotonic() - start
            detail = failed.value.detail
            seen.append((name, f"calls differ in {field}" in detail and "rank 2" in detail, waited < 20,
                         np.array_equal(x, before)))
            comm.update()
            assert comm.size == 3, "a mismatch loses nobody"
            y = np.full(8, comm.rank + 1, np.float32)
            comm.allreduce(y)
            assert (y == 6).all()
        return seen

    for rank, seen in enumerate(members(3, fn)):
        for name, named, prompt, intact in seen:
            assert named and prompt and intact, (rank, name, named, prompt, intact)


def test_bad_calls_raise_named_errors(members):
    def fn(comm):
        with pytest.raises(wccl.InvalidArgumentError, match="wire"):
            comm.allreduce(np.ones(8, np.float64), wire=wccl.Wire.INT8)
        with pytest.raises(wccl.InvalidArgumentError, match="only the TOPK wire keeps elements"):
            comm.allreduce(np.ones(8, np.float32), wire=wccl.Wire.INT8, topk_keep=4)
        with pytest.raises(wccl.InvalidArgumentError, match="topk_keep 65 is not 1..64"):
            comm.allreduce(np.ones(8, np.float32), wire=wccl.Wire.TOPK, topk_keep=65)
        with pytest.raises(ValueError, match="not contiguous"):
            comm.allreduce(np.ones((4, 4), np.float32)[:, 1])
        readonly = np.ones(4, np.float32)
        readonly.setflags(write=False)
        with pytest.raises(ValueError, match="tensor cannot be written"):
            comm.allreduce(readonly)
        comm.allreduce(readonly, out=np.empty(4, np.float32))  # a read-only input is fine with out=
        with pytest.raises(TypeError, match="complex|format"):
            comm.allreduce(np.ones(4, np.complex64))
        with pytest.raises(ValueError, match="out holds 3 elements, the operation needs 4"):
            comm.allreduce(np.ones(4, np.float32), out=np.empty(3, np.float32))
        with pytest.raises(TypeError, match="out has dtype F64"):
            comm.allreduce(np.ones(4, np.float32), out=np.empty(4, np.float64))
        with pytest.raises(ValueError, match="out holds 3 elements, the operation needs 4"):
            comm.allgather(np.ones(2, np.int8), np.empty(3, np.int8))
        with pytest.raises(TypeError, match="unknown option"):
            comm.barrier(wires=1)
        with pytest.raises(wccl.InvalidArgumentError, match="max_link_rate is 1000; 0 .unpaced. or at least 125000"):
            comm.allreduce(np.ones(4, np.float32), max_link_rate=1000)
        with pytest.raises(wccl.InvalidArgumentError, match=f"at least {wccl.MIN_LINK_RATE} bytes"):
            comm.allreduce(np.ones(4, np.float32), max_link_rate=wccl.MIN_LINK_RATE - 1)
        with pytest.raises(ValueError, match="max_link_rate must be 0"):
            comm.allreduce(np.ones(4, np.float32), max_link_rate=2**64)
        paced = np.ones(4, np.float32)
        comm.allreduce(paced, max_link_rate=wccl.MIN_LINK_RATE)
        assert np.array_equal(paced, np.full(4, 2, np.float32))
        z = np.arange(10000, dtype=np.float32) % 7
        stats = comm.allreduce(z, compress=wccl.Compress.ZSTD)
        assert np.array_equal(z, np.arange(10000) % 7 * 2) and stats.bytes_sent < 10000 * 4 // 4, stats
        with pytest.raises(wccl.InvalidArgumentError, match="root"):
            comm.broadcast(np.ones(4, np.float32), root=7)
        with pytest.raises(TypeError, match="not a numpy array"):
            comm.allreduce([1.0, 2.0])
        comm.allreduce(bytearray(b"\x01\x02"))  # any buffer: bytes as U8
        return True

    assert members(2, fn) == [True, True]


def test_update_due_says_when_the_group_waits_for_this_member(members):
    """Rank 0 comes to the update barrier; rank 1, idle, hears that the group waits for its update
    (update_due), and updating clears it; the epoch is confirmed unchanged."""
    ready, sampled = threading.Event(), threading.Barrier(2)

    def fn(comm):
        epoch = comm.epoch
        if comm.rank == 0:
            assert ready.wait(30) and not comm.update_due
            comm.update()
        else:
            assert not comm.update_due
            ready.set()
            deadline = time.monotonic() + 10
            while not comm.update_due:
                assert time.monotonic() < deadline, "rank 1 never heard of the barrier"
                time.sleep(0.01)
            comm.update()
        due = comm.update_due
        sampled.wait(30)  # before either leaves (the fixture's leave is an arrival at the next barrier)
        return due, comm.epoch == epoch

    assert members(2, fn) == [(False, True), (False, True)]


def test_closed_communicator_is_refused(members):
    def fn(comm):
        return comm

    comm = members(1, fn)[0]
    assert comm.rank == -1 and comm.size == 0
    with pytest.raises(wccl.InvalidUsageError, match="closed"):
        comm.allreduce(np.ones(2, np.float32))


def test_unreachable_coordinator():
    with pytest.raises(wccl.CoordinatorUnreachableError, match="127.0.0.1:1"):
        wccl.Communicator(coordinator="127.0.0.1:1", tls=False, join_timeout_ms=2000, connect_timeout_ms=1000,
                          log_level="error")


def test_tensors_on_other_devices_are_refused(members):
    if torch is None:
        pytest.skip("torch is not installed")

    def fn(comm):
        with pytest.raises(ValueError, match="device meta"):
            comm.allreduce(torch.empty(4, device="meta"))
        with pytest.raises(ValueError, match="not contiguous"):
            comm.allreduce(torch.ones(4, 4).t())
        with pytest.raises(TypeError, match="complex64"):
            comm.allreduce(torch.ones(4, dtype=torch.complex64))
        return True

    assert members(1, fn) == [True]




def test_wire_roundtrip_is_what_the_wire_keeps():
    """The error-feedback helper: each wire's roundtrip stays within its bound, the residual is
    what it dropped, NATIVE is exact, and a value a wire cannot carry leaves the output as it was."""
    rng = np.random.default_rng(4)
    x = (rng.standard_normal(5000) * 1e-3).astype(np.float32)
    x[::97] *= 300  # outliers, as pseudo-gradients have
    errors = {}
    for wire in wccl.Wire:
        y = np.empty_like(x)
        assert wccl.wire_roundtrip(x, wire, out=y) is y
        errors[wire] = float(np.abs(x - y).max())
        again = np.empty_like(x)
        wccl.wire_roundtrip(y, wire, out=again)
        if wire in (wccl.Wire.NATIVE, wccl.Wire.FP8, wccl.Wire.FP16, wccl.Wire.BF16):
            assert np.array_equal(again, y), wire  # what a wire keeps, it keeps exactly
    assert errors[wccl.Wire.NATIVE] == 0
    widest_block = max(float(np.ptp(x[i:i + 128])) for i in range(0, len(x), 128))
    assert 0 < errors[wccl.Wire.INT8] < errors[wccl.Wire.INT4] <= widest_block / 30 * 1.0001
    assert errors[wccl.Wire.INT4] < errors[wccl.Wire.INT2] <= widest_block / 6 * 1.0001
    assert errors[wccl.Wire.FP8] <= np.abs(x).max() / 16
    z = x.copy()
    wccl.wire_roundtrip(z, wccl.Wire.INT4)  # in place
    assert np.array_equal(z, wccl.wire_roundtrip(x.copy(), wccl.Wire.INT4))
    bad = x.copy()
    bad[4321] = np.nan
    out = np.zeros_like(x)
    for wire in (wccl.Wire.INT8, wccl.Wire.INT4, wccl.Wire.INT2, wccl.Wire.FP8, wccl.Wire.TOPK):
        with pytest.raises(wccl.InvalidArgumentError, match="element 4321 is NaN"):
            wccl.wire_roundtrip(bad, wire, out=out)
        assert not out.any(), "a refused roundtrip wrote its output"
    with pytest.raises(TypeError, match="float32"):
        wccl.wire_roundtrip(np.zeros(4, np.float64), wccl.Wire.INT8)
    # TOPK keeps what topk_keep says: the largest 1, 8 (the default) or 64 of each block of 256.
    for keep in (1, 8, 64):
        y = wccl.wire_roundtrip(x, wccl.Wire.TOPK, out=np.empty_like(x), topk_keep=keep)
        for b in range(0, len(x), 256):
            block, kept = x[b:b + 256], y[b:b + 256]
            assert np.count_nonzero(kept) <= keep
            largest = np.sort(np.abs(block))[::-1][:min(keep, len(block))]
            assert np.all(np.abs(block[kept != 0]) >= largest[-1])
    np.testing.assert_array_equal(wccl.wire_roundtrip(x, wccl.Wire.TOPK, out=np.empty_like(x)),
                                  wccl.wire_roundtrip(x, wccl.Wire.TOPK, out=np.empty_like(x), topk_keep=8))
    with pytest.raises(wccl.InvalidArgumentError, match="topk_keep -1 is not 1..64"):
        wccl.wire_roundtrip(x, wccl.Wire.TOPK, out=np.empty_like(x), topk_keep=-1)
    if torch is not None:
        t = torch.from_numpy(x.copy())
        wccl.wire_roundtrip(t, wccl.Wire.FP8)
        assert np.abs(t.numpy() - x).max() == errors[wccl.Wire.FP8]
