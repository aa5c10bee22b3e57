"""One replica group (one process) of a torchft job: LocalSGD over torchft's Manager, on
``wccl.torchft.ProcessGroupWccl`` or torchft's own ProcessGroupGloo (test_torchft.py starts them):
``torchft_worker.py BACKEND REPLICA_ID LIGHTHOUSE STEPS MIN_REPLICAS [PACE [sync|async [ALONE_PACE]]]``
(PACE: seconds each inner step lasts at least, standing in for compute; the quorum torchft's
default async, or sync; ALONE_PACE: the same while the last sync had this replica alone, so that
a restarted replica finds the job still running however long its start takes). Prints one JSON line per
committed sync and a last one with the final parameters' hash; wccl configuration comes from WCCL_*."""

import faulthandler
import json
import sys
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


def main():
    backend, replica, lighthouse, steps, min_replicas = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
    pace = float(sys.argv[6]) if len(sys.argv) > 6 else 0.0
    # A quorum taken at each step's start (not during it) makes every sync of a job of healthy
    # replicas have them all, however loaded the machine: what comparing two backends needs.
    async_quorum = sys.argv[7] == "async" if len(sys.argv) > 7 else True
    alone_pace = float(sys.argv[8]) if len(sys.argv) > 8 else pace
    torch.manual_seed(0)  # every replica starts from the same model
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)

    def load_state_dict(sd):
        model.load_state_dict(sd["model"])
        opt.load_state_dict(sd["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": opt.state_dict()}

    store = dist.TCPStore("localhost", 0, is_master=True, wait_for_workers=False)
    timeout = timedelta(seconds=20)
    pg = ProcessGroupWccl(timeout=timeout) if backend == "wccl" else ProcessGroupGloo(timeout=timeout)
    manager = Manager(pg=pg, min_replica_size=min_replicas, load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"replica{replica}", store_addr="localhost", store_port=store.port, rank=0,
                      world_size=1, lighthouse_addr=lighthouse, port=0, timeout=timeout,
                      quorum_timeout=timedelta(seconds=60), init_sync=False,
                      use_async_quorum=async_quorum)
    faulthandler.enable()  # a crash (SIGSEGV at exit, seen once) leaves every thread's stack in the log
    say(replica=replica, started=True)
    g = torch.Generator().manual_seed(1000 + replica)
    participants = 0  # in the last sync; 0 before the first
    try:
        with LocalSGD(manager, model, opt, sync_every=2):
            while manager.current_step() < steps:
                time.sleep(alone_pace if participants == 1 else pace)
                x = torch.randn(16, 8, generator=g)
                loss = torch.nn.functional.mse_loss(model(x), x.sum(1, keepdim=True).sin())
                opt.zero_grad()
                loss.backward()
                before = manager.current_step()
                opt.step()  # every second step: LocalSGD averages the parameters and commits
                if manager.current_step() != before:
                    participants = manager.num_participants()
                    say(replica=replica, step=manager.current_step(), participants=participants, loss=loss.item())
        say(replica=replica, final=flat_hash(list(model.state_dict().values())), step=manager.current_step())
    finally:
        manager.shutdown(wait=False)


if __name__ == "__main__":
    main()
