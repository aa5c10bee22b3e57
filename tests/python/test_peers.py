"""Members in their own processes (peer.py): every dtype from numpy and torch, the INT8 wire, a
member killed mid-run, and a late joiner catching up with sync_state."""

import base64
import os
import time

import numpy as np
import pytest
import wccl

from conftest import Peer, close_all, member_config

try:
    import torch
except ImportError:  # torch is optional: its cases skip
    torch = None

N = 3
COUNT = 1000
NUMPY_DTYPES = ["float32", "float64", "float16", "int8", "uint8", "int32", "int64"]
TORCH_DTYPES = NUMPY_DTYPES + ["bfloat16"]
CASES = [("numpy", d) for d in NUMPY_DTYPES] + [("torch", d) for d in TORCH_DTYPES]


def ask(peers, **cmd):
    for p in peers:
        p.request(cmd="allreduce", **cmd)
    return [p.reply() for p in peers]


def decode(b64, dtype):
    raw = np.frombuffer(base64.b64decode(b64), np.uint8)
    if dtype == "bfloat16":  # widen to float32: bfloat16 is the high half of a float32
        return (raw.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
    return raw.view(dtype)


@pytest.fixture(scope="module")
def group(pki):
    """Three members, shared by the cases that leave them whole (a process takes a second to start)."""
    with wccl.Coordinator(listen="127.0.0.1:0", min_peers=N, **pki) as coord:
        peers = [Peer(member_config(coord, pki)) for _ in range(N)]
        try:
            for p in peers:
                p.joined = p.reply()
            assert [p.joined["size"] for p in peers] == [N] * N
            yield sorted(peers, key=lambda p: p.joined["rank"])
        finally:
            codes = close_all(peers)
        assert codes == [0] * N, "every member left gracefully"


@pytest.mark.parametrize("lib,dtype", CASES, ids=[f"{lib}-{d}" for lib, d in CASES])
@pytest.mark.parametrize("op", ["SUM", "MAX"])
def test_every_dtype(group, lib, dtype, op):
    if lib == "torch" and torch is None:
        pytest.skip("torch is not installed")
    replies = ask(group, lib=lib, dtype=dtype, count=COUNT, op=op)
    assert all(r["ok"] for r in replies), replies
    i = np.arange(COUNT) % 5 + 1
    expected = i * (sum(range(1, N + 1)) if op == "SUM" else N)
    for r in replies:
        np.testing.assert_array_equal(decode(r["result"], dtype).astype(np.float64), expected)


@pytest.mark.parametrize("lib", ["numpy", "torch"])
def test_int8_wire(group, lib):
    if lib == "torch" and torch is None:
        pytest.skip("torch is not installed")
    count = 50_000
    native = ask(group, lib=lib, dtype="float32", count=count, random=True)
    coded = ask(group, lib=lib, dtype="float32", count=count, random=True, wire="INT8")
    assert all(r["ok"] for r in native + coded), coded
    assert len({r["result"] for r in coded}) == 1, "every member holds the same bits"
    exact = sum(decode(r["input"], "float32").astype(np.float64) for r in coded)
    error = np.max(np.abs(decode(coded[0]["result"], "float32") - exact))
    # docs/algorithms.md: at most n * ((hi - lo) / 510 + 2^-20 |x|) per element; hi - lo <= 2 per
    # member's block and grows to at most 2n in partial sums.
    assert error <= N * (2 * N / 510 + 2**-20 * N)
    assert 0.24 < coded[0]["bytes_sent"] / native[0]["bytes_sent"] < 0.26


@pytest.mark.parametrize("lib,dtype", [("numpy", "float16"), ("torch", "bfloat16"), ("torch", "float16")])
def test_half_data_on_the_int8_wire(group, lib, dtype):
    """F16 and BF16 data take the coded wires as F32 would (widened, rounded back once): every
    member holds the same bits, within the F32 bound plus one rounding, at INT8's bytes."""
    if lib == "torch" and torch is None:
        pytest.skip("torch is not installed")
    count = 50_000
    native = ask(group, lib=lib, dtype=dtype, count=count, random=True)
    coded = ask(group, lib=lib, dtype=dtype, count=count, random=True, wire="INT8")
    assert all(r["ok"] for r in native + coded), coded
    assert len({r["result"] for r in coded}) == 1, "every member holds the same bits"
    exact = sum(decode(r["input"], dtype).astype(np.float64) for r in coded)
    error = np.max(np.abs(decode(coded[0]["result"], dtype).astype(np.float64) - exact))
    rounding = 2.0**-8 if dtype == "bfloat16" else 2.0**-11  # relative, of a sum of magnitude at most N
    assert error <= N * (2 * N / 510 + 2**-20 * N) + N * rounding
    assert 0.49 < coded[0]["bytes_sent"] / native[0]["bytes_sent"] < 0.51  # a byte per 2-byte element


def test_a_failed_operation_reports_what_it_sent(spawn):
    """A NaN on the INT8 wire at the end of rank 1's buffer fails the all-reduce everywhere
    (INVALID_ARGUMENT there, PEER_LOST for the others) after rank 1 sent the blocks before it: the
    exception's stats say what the failed attempt cost. Buffers stay as they were. (A member whose
    call came after the revocation ran nothing: its error has no stats.)"""
    peers = spawn(N)
    count = 1 << 20
    replies = ask(peers, lib="numpy", dtype="float32", count=count, random=True, wire="INT8", nan_rank=1)
    assert sorted(r["error"] for r in replies) == ["InvalidArgumentError", "PeerLostError", "PeerLostError"], replies
    assert all(r["intact"] for r in replies), replies
    refused = next(r for r in replies if r["error"] == "InvalidArgumentError")
    assert refused["bytes_sent"] > 0.9 * count / N, refused  # at least one block of the INT8 wire went out


def test_killed_member(spawn):
    peers = spawn(N)
    assert all(r["ok"] for r in ask(peers, lib="numpy", dtype="float32", count=COUNT))
    peers[1].kill()
    survivors = [peers[0], peers[2]]
    lost = ask(survivors, lib="numpy", dtype="float32", count=COUNT)
    for r in lost:
        assert not r["ok"] and r["error"] == "PeerLostError", r
        assert "WCCL_ERR_PEER_LOST" in r["message"] and r["intact"], r
    for p in survivors:
        p.request(cmd="update")
    updates = [p.reply() for p in survivors]
    assert all(u["ok"] and u["size"] == 2 for u in updates), updates
    retried = ask(survivors, lib="torch" if torch else "numpy", dtype="float32", count=COUNT)
    assert all(r["ok"] for r in retried), retried
    i = np.arange(COUNT) % 5 + 1
    for r in retried:
        np.testing.assert_array_equal(decode(r["result"], "float32"), i * 3)  # ranks 0 and 1: 1 + 2


def admit(members, joiner, size):
    """Once the members hear that joiner waits (it waits in join until their next update admits it),
    every member updates: the new epoch has `size` members, the joiner among them."""
    deadline = time.monotonic() + 30
    while True:
        members[0].request(cmd="pending")
        if members[0].reply()["pending"] >= 1:
            break
        assert time.monotonic() < deadline, "the joiner never registered"
        time.sleep(0.05)
    for p in members:
        p.request(cmd="update")
    assert all(p.reply()["size"] == size for p in members)
    assert joiner.reply()["size"] == size


def test_late_joiner_catches_up_with_sync_state(coordinators, pki):
    coord = coordinators(min_peers=2)
    members = [Peer(member_config(coord, pki)) for _ in range(2)]
    joiner = None
    try:
        for p in members:
            p.joined = p.reply()
        joiner = Peer(member_config(coord, pki))
        admit(members, joiner, 3)
        count = 300_000
        for p, filled, revision in [(members[0], True, 4), (members[1], True, 4), (joiner, False, 0)]:
            p.request(cmd="sync", filled=filled, revision=revision, count=count)
        replies = [p.reply() for p in members + [joiner]]
        assert all(r["ok"] and r["revision"] == 4 and r["filled"] for r in replies), replies
        assert replies[2]["sources"] == 2 and replies[2]["tensors_received"] == 2
        assert replies[2]["bytes_received"] == count * 4 + 3 * 8
        assert replies[0]["bytes_received"] == replies[1]["bytes_received"] == 0

        # A member that passes another list: the same InvalidUsageError everywhere, nothing moves.
        for p, n in [(members[0], count), (members[1], count), (joiner, count + 1)]:
            p.request(cmd="sync", filled=p is not joiner, revision=5, count=n)
        replies = [p.reply() for p in members + [joiner]]
        assert all(r["error"] == "InvalidUsageError" for r in replies), replies
        assert len({r["message"] for r in replies}) == 1 and '"weights"' in replies[0]["message"]
    finally:
        assert close_all(members + ([joiner] if joiner else [])) == [0] * (3 if joiner else 2)


def test_an_epoch_of_joiners_alone_says_how_the_members_went(coordinators, pki):
    """wccl_comm_epoch_origin: the group's first epoch is FIRST; a joiner alone after its only
    member left is AFTER_LEAVE, after its only member was SIGKILLed AFTER_LOSS."""
    coord = coordinators(min_peers=1)
    config = member_config(coord, pki)
    first = wccl.Communicator(**config)
    assert first.epoch_origin == wccl.EpochOrigin.FIRST
    first.leave()
    first.close()
    killed = Peer(config)
    killed.joined = killed.reply()
    assert killed.joined["origin"] == int(wccl.EpochOrigin.AFTER_LEAVE), killed.joined
    killed.kill()
    after = wccl.Communicator(**config)
    try:
        assert after.epoch_origin == wccl.EpochOrigin.AFTER_LOSS and after.size == 1
    finally:
        after.close()


def established_tcp(pid):
    """How many established TCP connections process pid holds (Linux: its sockets' inodes in /proc/net/tcp*)."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:  # closed meanwhile
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:["):-1])
    count = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        if not os.path.exists(table):
            continue
        with open(table) as f:
            next(f)
            for line in f:
                fields = line.split()
                count += fields[3] == "01" and fields[9] in inodes  # 01: ESTABLISHED
    return count


def test_sixteen_members_hold_their_neighbours_links_only(coordinators, pki):
    """Sixteen member processes, the last admitted by an update, then one SIGKILLed: each holds at
    most 8 links of 4 streams and its coordinator connection (every other member's link was 15 x 4 + 1
    = 61 connections before protocol 9), before and after the joiner's state sync (striped over all 15
    donors, whose links are the sync's alone) and after the loss."""
    n, streams = 16, 4
    bound = 8 * streams + 1
    coord = coordinators(min_peers=n - 1)
    peers = [Peer(member_config(coord, pki)) for _ in range(n - 1)]
    joiner = None
    try:
        for p in peers:
            p.joined = p.reply()
        joiner = Peer(member_config(coord, pki))
        admit(peers, joiner, n)
        peers.append(joiner)

        def connections_within_bound(group):
            """Each member's connection count once it is within the bound (links close in their own time)."""
            deadline = time.monotonic() + 10
            while True:
                counts = [established_tcp(p.proc.pid) for p in group]
                if max(counts) <= bound or time.monotonic() > deadline:
                    return counts

        assert all(r["ok"] for r in ask(peers, lib="numpy", dtype="float32", count=COUNT))
        counts = connections_within_bound(peers)
        assert max(counts) <= bound and min(counts) >= 2 * streams + 1, counts

        count = 4 << 20  # 16 MiB: 16 pieces of the default 1 MiB chunk, so every donor sends one
        for p in peers:
            p.request(cmd="sync", filled=p is not joiner, revision=0 if p is joiner else 4, count=count)
        replies = [p.reply() for p in peers]
        assert all(r["ok"] and r["revision"] == 4 and r["filled"] for r in replies), replies
        assert replies[-1]["sources"] == n - 1, replies[-1]
        counts = connections_within_bound(peers)
        assert max(counts) <= bound, counts

        victim = peers[5]
        victim.kill()
        survivors = [p for p in peers if p is not victim]
        ask(survivors, lib="numpy", dtype="float32", count=COUNT)  # fails on the loss, or runs before it is seen
        for p in survivors:
            p.request(cmd="update")
        assert all(u["ok"] and u["size"] == n - 1 for u in [p.reply() for p in survivors])
        retried = ask(survivors, lib="numpy", dtype="float32", count=COUNT)
        assert all(r["ok"] for r in retried), retried
        counts = connections_within_bound(survivors)
        assert max(counts) <= bound, counts
    finally:
        everyone = peers + ([joiner] if joiner and joiner not in peers else [])
        codes = close_all([p for p in everyone if not p.killed])
        assert codes == [0] * len(codes), codes
