"""One replica group (one process) of a torchft job over wccl: torchft's Manager and LocalSGD on
``wccl.torchft.ProcessGroupWccl`` (docs/python.md, "torchft", shows the commands that run two of
them beside torchft's lighthouse). A small model, its state functions for torchft's healing, and the
loop; the parameters are averaged every ``--sync-every`` steps until ``--syncs`` syncs have been
committed. Prints one JSON line per committed sync and a last one with the final parameters' hash;
wccl's configuration comes from ``WCCL_*`` (TLS files, or ``WCCL_TLS=off`` for a rehearsal).

tests/python/test_torchft.py runs it, also on torchft's own ProcessGroupGloo (``--backend gloo``),
and with ``--pace`` standing in for compute."""

import argparse
import faulthandler
import json
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torchft import Manager, ProcessGroupGloo
from torchft.local_sgd import LocalSGD

from wccl.torch import flat_hash
from wccl.torchft import ProcessGroupWccl


def say(**kv):
    print(json.dumps(kv), flush=True)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--replica", type=int, required=True, help="this replica group's number (torchft replica id)")
    p.add_argument("--lighthouse", required=True, help="torchft_lighthouse's address, http://HOST:PORT")
    p.add_argument("--syncs", type=int, default=6, help="commit this many syncs, then stop")
    p.add_argument("--sync-every", type=int, default=2, help="inner steps per sync (LocalSGD's sync_every)")
    p.add_argument("--min-replicas", type=int, default=2, help="torchft's min_replica_size")
    p.add_argument("--backend", choices=("wccl", "gloo"), default="wccl", help="the process group")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds, the process group's and the Manager's")
    p.add_argument("--quorum", choices=("sync", "async"), default="sync",
                   help="sync: each sync's quorum taken at its step (use_async_quorum=False, as DiLoCo needs); "
                        "async: torchft's default, taken during the step")
    p.add_argument("--pace", type=float, default=0.0, help="seconds each inner step lasts at least (compute)")
    p.add_argument("--alone-pace", type=float, default=None,
                   help="the same while the last sync had this replica alone (default: --pace)")
    return p.parse_args()


def main():
    args = parse_args()
    alone_pace = args.pace if args.alone_pace is None else args.alone_pace
    torch.manual_seed(0)  # every replica starts from the same model
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)  # this replica's own
    timeout = timedelta(seconds=args.timeout)
    pg = ProcessGroupWccl(timeout=timeout) if args.backend == "wccl" else ProcessGroupGloo(timeout=timeout)
    manager = Manager(pg=pg, min_replica_size=args.min_replicas, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"replica{args.replica}", store_addr="localhost",
                      store_port=store.port, rank=0, world_size=1, lighthouse_addr=args.lighthouse, port=0,
                      timeout=timeout, quorum_timeout=timedelta(seconds=60), init_sync=False,
                      use_async_quorum=args.quorum == "async")
    faulthandler.enable()  # a crash (SIGSEGV at exit, seen once) leaves every thread's stack in the log
    say(replica=args.replica, started=True)
    g = torch.Generator().manual_seed(1000 + args.replica)
    participants = 0  # in the last sync; 0 before the first
    try:
        with LocalSGD(manager, model, opt, sync_every=args.sync_every):
            while manager.current_step() < args.syncs:
                time.sleep(alone_pace if participants == 1 else args.pace)
                x = torch.randn(16, 8, generator=g)
                loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True).sin())
                opt.zero_grad()
                loss.backward()
                before = manager.current_step()
                opt.step()  # every sync_every-th step: LocalSGD averages the parameters and commits
                if manager.current_step() != before:
                    participants = manager.num_participants()
                    say(replica=args.replica, step=manager.current_step(), participants=participants,
                        loss=loss.item())
        say(replica=args.replica, final=flat_hash(list(model.state_dict().values())), step=manager.current_step())
    finally:
        manager.shutdown(wait=False)


if __name__ == "__main__":
    main()
