"""A group member in its own process for the pytest suite (conftest.Peer drives it).

It joins with the configuration in the WCCL_* environment, prints one JSON line
{"rank", "size", "epoch", "origin"}, then answers each JSON command it reads on stdin with one JSON line:
  {"cmd": "allreduce", "lib": "numpy"|"torch", "dtype": NAME, "count": N, "op": NAME, "wire": NAME}
      element i of rank r is (r + 1) * (i % 5 + 1), or for "random": true, uniform in [-1, 1) from
      seed r; "nan_rank": r puts a NaN in rank r's last element. Answers {"ok", "error", "message",
      "result" (base64 of the output bytes), "input" (base64 of the input bytes), "intact" (the
      buffer equals its input after a failure), "bytes_sent" (a failed attempt's too)}.
  {"cmd": "update"}   answers {"ok", "error", "rank", "size", "epoch"}.
  {"cmd": "pending"}  answers {"pending"}: peers waiting to be admitted.
  {"cmd": "sync", "filled": BOOL, "revision": R, "count": N}
      sync_state of {"weights": float32[N] from numpy, "step": int64[3] from torch (numpy without
      torch)}, holding (i % 7) * 0.5 and (7, 8, 9) when filled, zeros otherwise. Answers {"ok",
      "error", "message", "revision", "sources", "tensors_received", "bytes_received", "filled"
      (the tensors now hold the filled values)}.
At the end of its input it leaves gracefully.
"""

import base64
import json
import sys

import numpy as np

import wccl


def filled(lib, dtype, count, rank, random):
    if random:
        values = np.random.default_rng(rank).uniform(-1.0, 1.0, count).astype(np.float32)
    else:
        values = ((rank + 1) * (np.arange(count) % 5 + 1)).astype(np.float64)
    if lib == "torch":
        import torch
        return torch.from_numpy(np.asarray(values, dtype=np.float64)).to(getattr(torch, dtype))
    return values.astype(dtype)


def raw(buf):
    if hasattr(buf, "data_ptr"):  # torch: view the bytes through uint8 (bfloat16 has no numpy dtype)
        buf = buf.view(__import__("torch").uint8).numpy()
    return base64.b64encode(np.ascontiguousarray(buf).tobytes()).decode()


def allreduce(comm, cmd):
    buf = filled(cmd["lib"], cmd["dtype"], cmd["count"], comm.rank, cmd.get("random", False))
    if cmd.get("nan_rank") == comm.rank:
        buf[-1] = float("nan")
    before = raw(buf)
    try:
        stats = comm.allreduce(buf, wccl.ReduceOp[cmd.get("op", "SUM")], wire=wccl.Wire[cmd.get("wire", "NATIVE")])
    except wccl.WcclError as e:
        return {"ok": False, "error": type(e).__name__, "message": str(e), "intact": raw(buf) == before,
                "bytes_sent": e.stats.bytes_sent if e.stats is not None else None}
    return {"ok": True, "result": raw(buf), "input": before, "bytes_sent": stats.bytes_sent}


def sync(comm, cmd):
    n = cmd["count"]
    weights = (np.arange(n) % 7 * 0.5).astype(np.float32) if cmd["filled"] else np.zeros(n, np.float32)
    step = np.array([7, 8, 9] if cmd["filled"] else [0, 0, 0], np.int64)
    try:
        import torch
        step = torch.from_numpy(step)
    except ImportError:
        pass
    try:
        stats = comm.sync_state({"weights": weights, "step": step}, cmd["revision"])
    except wccl.WcclError as e:
        return {"ok": False, "error": type(e).__name__, "message": str(e)}
    filled = bool(np.array_equal(weights, np.arange(n) % 7 * 0.5) and list(np.asarray(step)) == [7, 8, 9])
    return {"ok": True, "revision": stats.revision, "sources": stats.sources, "filled": filled,
            "tensors_received": stats.tensors_received, "bytes_received": stats.bytes_received}


def update(comm):
    try:
        comm.update()
    except wccl.WcclError as e:
        return {"ok": False, "error": type(e).__name__, "message": str(e)}
    return {"ok": True, "rank": comm.rank, "size": comm.size, "epoch": comm.epoch}


def main():
    with wccl.Communicator() as comm:
        print(json.dumps({"rank": comm.rank, "size": comm.size, "epoch": comm.epoch, "origin": int(comm.epoch_origin)}), flush=True)
        for line in sys.stdin:
            cmd = json.loads(line)
            if cmd["cmd"] == "allreduce":
                reply = allreduce(comm, cmd)
            elif cmd["cmd"] == "sync":
                reply = sync(comm, cmd)
            elif cmd["cmd"] == "pending":
                reply = {"pending": comm.pending}
            else:
                reply = update(comm)
            print(json.dumps(reply), flush=True)


if __name__ == "__main__":
    main()
