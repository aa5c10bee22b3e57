"""torchft's DiLoCo on the reference trainer's model, data and hyperparameters: one replica group
(one process, one rank) under torchft's Manager, over torchft's gloo group or wccl's
(``wccl.torchft.ProcessGroupWccl``), for the side-by-side of torchft_compare.py (docs/trainer.md,
"Beside torchft"):

    python examples/diloco/torchft_train.py --lighthouse http://HOST:29510 --replica-id r0 \
        --host ADDRESS --backend wccl --wire int8 --min-replicas 2 --metrics r0.jsonl \
        --outer-steps 20 --inner-steps 8

The model (model.py's GPT), the corpus, the batch, AdamW inner steps with the gradient clipped to
norm 1, and the outer Nesterov SGD (lr 0.7, momentum 0.9) are train.py's defaults; torchft's DiLoCo
does the outer step (pseudo-gradients averaged by ``Manager.allreduce`` in one bucket), the quorum
(torchft's lighthouse) and the healing of a joiner (torchft's HTTP checkpoint transport). ``--host``
is the address the other replicas reach this one at (its TCPStore, torchft's manager and checkpoint
server); wccl's configuration comes from WCCL_* (the coordinator, TLS files). Writes one JSON line
per committed outer step and a final one with the model's hash, as train.py's records.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import timedelta
from pathlib import Path

STARTED = time.time()

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torchft import Manager, ProcessGroupGloo  # noqa: E402
from torchft.local_sgd import DiLoCo  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from model import GPT, Batches, load_corpus  # noqa: E402
from train import data_seed  # noqa: E402

import wccl  # noqa: E402
from wccl.torch import Options, flat_hash  # noqa: E402
from wccl.torchft import ProcessGroupWccl  # noqa: E402

WIRES = {"native": wccl.Wire.NATIVE, "int8": wccl.Wire.INT8}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lighthouse", required=True, help="torchft's lighthouse, http://HOST:PORT")
    p.add_argument("--replica-id", required=True, help="this replica group's name (also seeds its data)")
    p.add_argument("--host", required=True, help="the address other replicas reach this one at")
    p.add_argument("--backend", choices=["gloo", "wccl"], default="gloo")
    p.add_argument("--wire", choices=list(WIRES), default="native", help="wccl's wire for the all-reduces")
    p.add_argument("--topk-keep", type=int, default=0, metavar="K",
                   help="with --wire topk: elements kept of each block of 256, 1..64 (0: the default 8)")
    p.add_argument("--min-replicas", type=int, default=1, help="torchft's min_replica_size")
    p.add_argument("--timeout", type=float, default=60.0, help="torchft's timeout for collectives and quorums (s)")
    p.add_argument("--outer-steps", type=int, default=50)
    p.add_argument("--inner-steps", "-H", type=int, default=50)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--inner-lr", type=float, default=3e-3)
    p.add_argument("--weight-decay", type=float, default=0.1)
    p.add_argument("--outer-lr", type=float, default=0.7)
    p.add_argument("--outer-momentum", type=float, default=0.9)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--dim", type=int, default=128)
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--data")
    p.add_argument("--data-bytes", type=int, default=16 << 20)
    p.add_argument("--metrics", required=True, help="JSONL file of the records")
    return p.parse_args(argv)


def main(argv=None) -> None:
    a = parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(a.seed)  # every replica starts from the same model, as train.py's nodes
    model = GPT(a.dim, a.layers, a.heads, a.seq_len)
    inner = torch.optim.AdamW(model.parameters(), lr=a.inner_lr, weight_decay=a.weight_decay)
    outer = torch.optim.SGD(model.parameters(), lr=a.outer_lr, momentum=a.outer_momentum, nesterov=True)
    data = Batches(load_corpus(a.data, a.data_bytes), a.seq_len, seed=data_seed(a.seed, a.replica_id, 0, 0))
    eval_x, eval_y = data.eval_batch(16)

    @torch.no_grad()
    def eval_loss() -> float:
        return float(model(eval_x, eval_y))
    log = open(a.metrics, "w")

    def write(record: dict) -> None:
        log.write(json.dumps({**record, "unix_time": time.time()}) + "\n")
        log.flush()

    def state_dict():
        return {"model": model.state_dict(), "inner": inner.state_dict(), "outer": outer.state_dict()}

    def load_state_dict(sd) -> None:
        model.load_state_dict(sd["model"])
        inner.load_state_dict(sd["inner"])
        outer.load_state_dict(sd["outer"])

    timeout = timedelta(seconds=a.timeout)
    pg = (ProcessGroupWccl(timeout=timeout, options=Options(wire=WIRES[a.wire], topk_keep=a.topk_keep))
          if a.backend == "wccl"
          else ProcessGroupGloo(timeout=timeout))
    store = dist.TCPStore(a.host, 0, is_master=True, wait_for_workers=False)
    manager = Manager(pg=pg, load_state_dict=load_state_dict, state_dict=state_dict, min_replica_size=a.min_replicas,
                      use_async_quorum=False, timeout=timeout, quorum_timeout=timeout, replica_id=a.replica_id,
                      store_addr=a.host, store_port=store.port, lighthouse_addr=a.lighthouse, hostname=a.host,
                      rank=0, world_size=1)
    write({"event": "started", "import_s": time.time() - STARTED})
    tokens_per_inner = a.batch_size * a.seq_len
    tokens, inner_steps = 0, 0
    try:
        with DiLoCo(manager, [model], inner, outer, sync_every=a.inner_steps, use_bucketization=True):
            while manager.current_step() < a.outer_steps:
                x, y = data.next(a.batch_size)
                loss = model(x, y)
                loss.backward()
                torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
                before = manager.current_step()
                inner.step()  # every H-th: torchft's DiLoCo all-reduces, steps the outer optimizer, commits
                inner.zero_grad()
                inner_steps += 1
                if manager.current_step() != before:
                    participants = manager.num_participants()
                    tokens += participants * tokens_per_inner * a.inner_steps
                    write({"event": "step", "step": manager.current_step(), "participants": participants,
                           "train_loss": loss.item(), "eval_loss": eval_loss(), "tokens": tokens,
                           "inner_steps": inner_steps, "time": time.time() - STARTED})
        write({"event": "final", "step": manager.current_step(), "hash": flat_hash(list(model.state_dict().values())),
               "eval_loss": eval_loss(), "tokens": tokens, "time": time.time() - STARTED})
    finally:
        manager.shutdown(wait=False)
        log.close()


if __name__ == "__main__":
    main()
