"""The reference DiLoCo + FSDP2 trainer on wccl (docs/trainer.md).

One node, L local ranks:

    torchrun --nproc-per-node L examples/diloco/train.py --coordinator HOST:PORT \
        --tls-cert node.pem --tls-key node.key --tls-ca ca.pem --node-name NAME [options]

Inside the node, FSDP2 shards the model over the L ranks (gloo on CPU, NCCL on GPUs). Across
nodes, local rank r averages its shard with rank r of every other node through one wccl
communicator (wccl.torch.ElasticDeviceMesh). ``--mode diloco`` runs DiLoCo: H inner AdamW steps,
then the pseudo-gradient (outer - current parameters of the shard) is summed over the nodes that
trained (INT8 wire by default) and the outer Nesterov SGD step applied; nodes join mid-run through
wccl_state_sync and lost nodes are dropped without losing or repeating an outer step.
``--mode sync`` is the synchronous data-parallel baseline: every inner step's gradient shard is
averaged over the nodes (fixed membership: it survives lost nodes but admits no joiner).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Dict, List, Tuple

STARTED = time.time()  # before torch is imported: the joined record says where a node's start-up goes

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.distributed.fsdp import fully_shard  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
import membership  # noqa: E402
from membership import Position  # noqa: E402
from model import GPT, Batches, load_corpus  # noqa: E402

import wccl  # noqa: E402
from wccl.torch import ElasticDeviceMesh, MembershipError, flat_hash  # noqa: E402

IMPORTED = time.time()
WAIT_S = 1.0  # between rosters while no node holds the job's state (membership.Wait)

SYNC_MODES = {membership.SEND_ONLY: wccl.SyncMode.SEND_ONLY, membership.RECEIVE_ONLY: wccl.SyncMode.RECEIVE_ONLY,
              membership.POPULAR: wccl.SyncMode.POPULAR}
WIRES = {"int8": wccl.Wire.INT8, "int4": wccl.Wire.INT4, "int2": wccl.Wire.INT2, "topk": wccl.Wire.TOPK, "fp8": wccl.Wire.FP8, "fp16": wccl.Wire.FP16, "bf16": wccl.Wire.BF16,
         "native": wccl.Wire.NATIVE}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    j = p.add_argument_group("job")
    j.add_argument("--coordinator", required=True, help="the wccl coordinator's HOST:PORT")
    j.add_argument("--node-name", default=os.uname().nodename, help="this node's name (logs, metrics file)")
    j.add_argument("--tls", choices=["on", "off"], default="on", help="TLS 1.3 with mutual certificates")
    j.add_argument("--tls-cert", help="this node's PEM certificate")
    j.add_argument("--tls-key", help="its private key")
    j.add_argument("--tls-ca", help="the job's CA certificate")
    j.add_argument("--listen", default="0.0.0.0:0",
                   help="HOST:PORT the node's wccl links listen on; local rank r listens on PORT + r (0: any port)")
    j.add_argument("--advertise", default="",
                   help="HOST:PORT the other nodes reach local rank 0 at, PORT + r for local rank r (default: the "
                        "address the coordinator sees, with the listening port)")
    j.add_argument("--group-prefix", default="lr", help="wccl group of local rank r: PREFIX + r")
    j.add_argument("--admit-timeout", type=float, default=3600.0,
                   help="seconds a node waits to be admitted (joining, or updating after a loss), or for a node "
                        "holding the job's state when none here does, before it stops with an error; above the "
                        "longest outer step, since joiners are admitted at step boundaries")
    j.add_argument("--wccl-log", default="warn", choices=["error", "warn", "info", "debug"],
                   help="wccl's log threshold (its log goes to stderr)")
    j.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")
    t = p.add_argument_group("training")
    t.add_argument("--mode", choices=["diloco", "sync"], default="diloco", help="DiLoCo, or the synchronous baseline")
    t.add_argument("--outer-steps", type=int, default=50,
                   help="outer steps: each fragment is synchronised this many times (sync mode: inner steps / H)")
    t.add_argument("--inner-steps", "-H", type=int, default=50, help="H: inner steps per outer step")
    t.add_argument("--batch-size", type=int, default=16, help="sequences per local rank per inner step")
    t.add_argument("--inner-lr", type=float, default=3e-3, help="AdamW learning rate")
    t.add_argument("--weight-decay", type=float, default=0.1)
    t.add_argument("--fragments", "-P", type=int, default=1,
                   help="streaming DiLoCo: each local rank's shard is split into P fragments, synchronised in "
                        "turn, one every H/P inner steps (each fragment every H)")
    t.add_argument("--overlap", type=int, default=0,
                   help="tau: a fragment's all-reduce runs while the next tau inner steps do (at most H/P); "
                        "0 waits for it")
    t.add_argument("--pace", type=float, default=0.0, metavar="F",
                   help="with --overlap: each overlapped all-reduce's links are paced so that its bytes take F times "
                        "the time of the inner steps it overlaps (both measured at the previous overlapped sync), "
                        "which lowers the peak rate on the wire; 0: unpaced")
    t.add_argument("--mix", type=float, default=0.0,
                   help="alpha: a synchronised fragment becomes alpha * local + (1 - alpha) * outer (0: the outer "
                        "parameters, DiLoCo's rule)")
    t.add_argument("--outer-lr", type=float, default=0.7, help="outer Nesterov SGD learning rate (DiLoCo's 0.7)")
    t.add_argument("--outer-momentum", type=float, default=0.9, help="outer Nesterov momentum (DiLoCo's 0.9)")
    t.add_argument("--wire", choices=list(WIRES), default="int8", help="wire format of the pseudo-gradient all-reduce")
    t.add_argument("--topk-keep", type=int, metavar="K",
                   help="elements the topk wire keeps of each block of 256, 1..64 (default 8: 64x fewer bytes "
                        "than F32; 2: 146x); with the topk wire of the mode (--wire, --sync-wire)")
    t.add_argument("--error-feedback", action="store_true",
                   help="keep what the wire drops of each pseudo-gradient (per local rank) and add it to the next")
    t.add_argument("--sync-wire", choices=list(WIRES), default="native", help="wire format of the baseline's gradients")
    t.add_argument("--seed", type=int, default=0, help="model initialisation (the same on every node)")
    m = p.add_argument_group("model and data")
    m.add_argument("--dim", type=int, default=128)
    m.add_argument("--layers", type=int, default=4)
    m.add_argument("--heads", type=int, default=4)
    m.add_argument("--seq-len", type=int, default=128)
    m.add_argument("--data", help="a text or uint8 token file (default: the Python standard library's sources)")
    m.add_argument("--data-bytes", type=int, default=16 << 20, help="at most this many bytes of the corpus")
    c = p.add_argument_group("checkpoints (DiLoCo mode)")
    c.add_argument("--checkpoint-dir", help="directory (local or shared) for checkpoints of the outer state: "
                                            "DIR/NODE/rank<r>/step-<k>.pt; the two newest are kept")
    c.add_argument("--checkpoint-every", type=int, default=10,
                   help="write one every N committed outer steps (N * P syncs)")
    c.add_argument("--resume", action="store_true",
                   help="start from the newest checkpoint in --checkpoint-dir (any node's, for this "
                        "configuration) that every local rank has, instead of outer step 0")
    o = p.add_argument_group("output")
    o.add_argument("--metrics", help="JSONL file: one record per outer step, then a final record (emptied at "
                                    "start, appended to when torchrun restarts the node's workers)")
    o.add_argument("--no-progress", action="store_true", help="no progress bar")
    o.add_argument("--metrics-port", type=int, default=None,
                   help="serve Prometheus metrics on this port (local rank 0; 0 picks one; prometheus_export.py "
                        "lists them; needs prometheus_client)")
    o.add_argument("--metrics-host", default="127.0.0.1", help="address --metrics-port binds (default localhost)")
    o.add_argument("--fault-nan-at-step", type=int, default=-1,
                   help="rehearsal: once N syncs are committed, local rank 0's pseudo-gradient of sync N+1 "
                        "holds a NaN")
    o.add_argument("--fault-kill-at-step", type=int, default=-1,
                   help="rehearsal: once N syncs are committed, SIGKILL this node's processes when local rank "
                        "0's all-reduce of sync N+1 is in flight")
    return p.parse_args(argv)


def rank_address(address: str, local_rank: int) -> str:
    """HOST:PORT of local rank r: PORT + r, so that a node's ranks never share a port (PORT 0, any
    free port, and an empty address stay as they are)."""
    if not address:
        return address
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        raise SystemExit(f"--listen/--advertise: {address!r} is not HOST:PORT")
    return address if int(port) == 0 else f"{host}:{int(port) + local_rank}"


def data_seed(seed: int, node_name: str, joined_step: int, local_rank: int) -> int:
    """The seed of a local rank's stream of training windows: a hash of the whole node name (names
    that share a prefix, worker-1 and worker-2, draw different batches), of the outer step at which
    the node joined (a node that is restarted and joins again does not replay its earlier batches)
    and of the local rank."""
    return membership.hash63(f"{seed}/{node_name}/{joined_step}/{local_rank}")


def fragment_bounds(size: int, fragments: int) -> List[Tuple[int, int]]:
    """[lo, hi) of each fragment of a shard vector of ``size`` elements: contiguous, in parameter
    order (so roughly runs of layers), sizes differing by at most one element."""
    return [(size * p // fragments, size * (p + 1) // fragments) for p in range(fragments)]


def feed_back(delta: torch.Tensor, residual: torch.Tensor, wire: "wccl.Wire", topk_keep: int) -> None:
    """Error feedback: the residual joins the pseudo-gradient, and what the wire will drop of the
    sum (its roundtrip as this rank's contribution) becomes the next residual. Done once per sync:
    a retry after a lost node sends the same pseudo-gradient."""
    delta.add_(residual)
    kept = wccl.wire_roundtrip(delta, wire, out=residual, topk_keep=topk_keep)
    torch.sub(delta, kept, out=residual)


def restarted() -> bool:
    """True in workers that torchrun started again after a failure of the node's workers."""
    return int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) > 0


class Trainer:
    def __init__(self, args):
        self.args = args
        self.local_rank, self.local_size = dist.get_rank(), dist.get_world_size()
        self.device = torch.device(f"cuda:{int(os.environ.get('LOCAL_RANK', 0))}" if args.device == "cuda" else "cpu")
        torch.manual_seed(args.seed)
        self.model = GPT(args.dim, args.layers, args.heads, args.seq_len).to(self.device)
        self.n_params = sum(p.numel() for p in self.model.parameters())
        for block in self.model.blocks:
            fully_shard(block)
        fully_shard(self.model)
        self.params = list(self.model.parameters())
        self.shard_size = sum(p.to_local().numel() for p in self.params)
        self.opt = torch.optim.AdamW(self.params, lr=args.inner_lr, weight_decay=args.weight_decay)
        # This rank's shard of the outer parameters and of the outer optimizer's momentum, on the CPU.
        self.outer = self.shard_vector()
        self.momentum = torch.zeros_like(self.outer)
        # Error feedback: what the wire dropped of this rank's earlier pseudo-gradients (zero for a
        # node that joins: it has sent nothing yet).
        self.residual = torch.zeros_like(self.outer) if args.error_feedback else None
        self.counters = torch.zeros(2, dtype=torch.int64)  # tokens trained on by the job, inner steps of this job
        # Seeded again once the node knows the outer step it joins at (run()).
        corpus = load_corpus(args.data, args.data_bytes)
        # What a run's losses depend on beyond its flags: the same seed ends elsewhere on another corpus
        # (the default one is whatever this interpreter's library holds) or with torch's kernels for
        # another CPU (docs/trainer.md, "Comparing runs").
        self.numerics = {"torch": torch.__version__, "cpu_kernels": torch.backends.cpu.get_cpu_capability(),
                         "corpus_bytes": len(corpus),
                         "corpus_sha256": hashlib.sha256(corpus.to(torch.uint8).numpy().tobytes()).hexdigest()}
        self.data = Batches(corpus, args.seq_len, seed=0)
        self.eval_x, self.eval_y = (t.to(self.device) for t in self.data.eval_batch(16))
        tls = {"tls": "off"} if args.tls == "off" else {"tls_cert": args.tls_cert, "tls_key": args.tls_key, "tls_ca": args.tls_ca}
        self.startup = {"import_s": IMPORTED - STARTED, "setup_s": time.time() - IMPORTED}
        t = time.time()
        self.mesh = ElasticDeviceMesh(coordinator=args.coordinator, name=args.node_name,
                                      listen=rank_address(args.listen, self.local_rank),
                                      advertise=rank_address(args.advertise, self.local_rank),
                                      group_prefix=args.group_prefix,
                                      admit_timeout=args.admit_timeout,
                                      log_level=args.wccl_log, **tls)
        founder = self.mesh.joined_origin in (wccl.EpochOrigin.FIRST, wccl.EpochOrigin.AFTER_LEAVE)
        self.pos = Position(joined_origin=int(self.mesh.joined_origin),
                            founding=self.mesh.joined_size if founder else 0)
        a = args
        self.fingerprint = membership.configuration_fingerprint(
            local_size=self.local_size, mode=a.mode, dim=a.dim, layers=a.layers, heads=a.heads, seq_len=a.seq_len,
            inner_steps=a.inner_steps, fragments=a.fragments, overlap=a.overlap, mix=a.mix, inner_lr=a.inner_lr,
            weight_decay=a.weight_decay, outer_lr=a.outer_lr,
            outer_momentum=a.outer_momentum, wire=a.wire, error_feedback=a.error_feedback, sync_wire=a.sync_wire,
            topk_keep=self.topk_keep(WIRES[a.wire if a.mode == "diloco" else a.sync_wire]), seed=a.seed)
        self.n_contrib = 0
        self.nodes = 0
        self.waiting_since: "float | None" = None  # since when no node here holds the job's state (Wait)
        self.pids = [v[0] for v in self.mesh.gather([os.getpid()])]
        self.startup["admission_s"] = time.time() - t

    # --- the shard as one vector ----------------------------------------------------------------

    def pieces(self, lo: int, hi: int):
        """(flat view of a parameter's local shard, its range, the range's position in [lo, hi)) for
        each parameter that holds elements [lo, hi) of this rank's shard vector."""
        start = 0
        for p in self.params:
            local = p.to_local().view(-1)
            a, b = max(lo, start), min(hi, start + local.numel())
            if a < b:
                yield local, slice(a - start, b - start), slice(a - lo, b - lo)
            start += local.numel()

    def shard_vector(self, lo: int = 0, hi: int = -1) -> torch.Tensor:
        """Elements [lo, hi) of this rank's shard (default: all), F32 on the CPU."""
        hi = self.shard_size if hi < 0 else hi
        return torch.cat([local[mine].detach().float().cpu() for local, mine, _ in self.pieces(lo, hi)])

    def load_shard(self, vec: torch.Tensor, lo: int = 0, mix: float = 0.0) -> None:
        """Sets elements [lo, lo + len(vec)) of this rank's shard to vec, or with ``mix`` > 0 to
        mix * themselves + (1 - mix) * vec (Streaming DiLoCo's merge of a synchronised fragment)."""
        # FSDP2 keeps the root module's parameters gathered after a forward (it expects a backward
        # next): after an evaluation, the next forward would use them and not what is written here.
        self.model.reshard()
        with torch.no_grad():
            for local, mine, theirs in self.pieces(lo, lo + vec.numel()):
                if mix == 0.0:
                    local[mine].copy_(vec[theirs])
                else:
                    local[mine].lerp_(vec[theirs].to(local), 1.0 - mix)

    def grad_vector(self) -> torch.Tensor:
        return torch.cat([p.grad.to_local().reshape(-1).float().cpu() for p in self.params])

    def load_grads(self, vec: torch.Tensor) -> None:
        offset = 0
        for p in self.params:
            g = p.grad.to_local()
            g.copy_(vec[offset:offset + g.numel()].view_as(g))
            offset += g.numel()

    def state(self):
        return {"outer": self.outer, "momentum": self.momentum, "counters": self.counters}

    # --- checkpoints ----------------------------------------------------------------------------

    def checkpoint_path(self, node: str, step: int) -> Path:
        return Path(self.args.checkpoint_dir) / node / f"rank{self.local_rank}" / f"step-{step:08d}.pt"

    def save_checkpoint(self) -> None:
        """This rank's outer state at the boundary after a committed step (the model's shard equals
        the outer parameters there), written to a temporary file and renamed, so a kill mid-write
        leaves the previous checkpoint whole; the two newest are kept."""
        path = self.checkpoint_path(self.args.node_name, self.pos.step)
        path.parent.mkdir(parents=True, exist_ok=True)
        state = {"step": self.pos.step, "fingerprint": self.fingerprint, **self.state()}
        if self.residual is not None:
            state["residual"] = self.residual
        tmp = path.with_suffix(".tmp")
        torch.save(state, tmp)
        os.replace(tmp, path)
        for old in sorted(path.parent.glob("step-*.pt"))[:-2]:
            old.unlink()

    def resume(self) -> None:
        """Loads the newest checkpoint step that every local rank of this node finds (any node's
        directory, this configuration only) and takes its outer state as its own: the node then
        holds the job's state at that step, and settle() brings it up to date if the others are
        further. The inner optimizer's moments start afresh, as a joiner's do."""
        found: Dict[int, List[Path]] = {}  # step: every node's file of it (several configurations may share the dir)
        for f in sorted(Path(self.args.checkpoint_dir).glob(f"*/rank{self.local_rank}/step-*.pt")):
            found.setdefault(int(f.stem.split("-")[1]), []).append(f)
        every = [None] * self.local_size
        dist.all_gather_object(every, sorted(found))
        steps = set.intersection(*(set(s) for s in every))
        for step in sorted(steps, reverse=True):
            state, path = None, None
            for f in found[step]:
                candidate = torch.load(f, weights_only=True, mmap=True)  # another configuration's is not read whole
                if candidate["fingerprint"] == self.fingerprint:
                    state, path = candidate, f
                    break
            if not self.mesh.agree(state is not None):
                continue  # no checkpoint of this configuration at this step, on some local rank
            self.outer.copy_(state["outer"])
            self.momentum.copy_(state["momentum"])
            self.counters.copy_(state["counters"])
            if self.residual is not None and "residual" in state:
                self.residual.copy_(state["residual"])
            self.load_shard(self.outer)
            self.pos.step, self.pos.fresh = step, False
            if self.local_rank == 0:
                print(f"[{self.args.node_name}] resuming from the checkpoint of outer step {step} ({path})",
                      file=sys.stderr, flush=True)
            return
        if self.local_rank == 0:
            print(f"[{self.args.node_name}] --resume: no checkpoint of this configuration in "
                  f"{self.args.checkpoint_dir}; starting fresh", file=sys.stderr, flush=True)

    # --- membership -----------------------------------------------------------------------------

    def membership_call(self, c: "membership.Call"):
        """Makes one of settle's mesh calls (Update, Roster, Sync) and returns its result."""
        if isinstance(c, membership.Update):
            return self.mesh.update()
        if isinstance(c, membership.Roster):
            groups = self.mesh.groups()
            rows = self.mesh.roster([*c.info, groups.pending, int(groups.origin), groups.epoch])
            return None if rows is None else [membership.Row.decode(r.node_id, r.info) for r in rows]
        if isinstance(c, membership.Wait):
            if self.waiting_since is None:
                self.waiting_since = time.monotonic()
                if self.local_rank == 0:
                    print(f"[{self.args.node_name}] no node here holds the job's state (its nodes were all lost): "
                          f"waiting up to {self.args.admit_timeout:g} s for one", file=sys.stderr, flush=True)
            time.sleep(WAIT_S)
            return self.mesh.agree(time.monotonic() - self.waiting_since > self.args.admit_timeout)
        self.waiting_since = None
        if self.args.mode == "sync":
            self.outer = self.shard_vector()
        revision = self.mesh.sync_state(self.state(), c.revision, SYNC_MODES[c.mode])
        if revision is not None and c.receive:
            self.load_shard(self.outer)
        return revision

    def exit_from_job(self, e: Exception) -> SystemExit:
        """Refused (another configuration) or Stopped (the job ended, or its state never came back):
        the node leaves its groups, or, waiting for the job's state, only closes them (a node
        holding it that comes back later then finds the job's nodes lost, not left: it goes on);
        the caller raises the exit."""
        if isinstance(e, membership.Stopped):
            (self.mesh.leave if e.job_ended else self.mesh.close)()
            return SystemExit(f"[{self.args.node_name}] stops: {e}")
        self.mesh.leave()
        return SystemExit(f"[{self.args.node_name}] refused by the job: {e}")

    def settle(self, need_update: bool) -> None:
        """Makes the mesh calls membership.settle asks for until every node agrees (examples/diloco/
        membership.py holds the rules); sets the nodes of the epoch and the step's divisor."""
        try:
            outcome = membership.run(membership.settle(self.pos, self.mesh.node_id, fingerprint=self.fingerprint,
                                                       sync_mode=self.args.mode == "sync", need_update=need_update),
                                     self.membership_call)
        except (membership.Refused, membership.Stopped) as e:
            raise self.exit_from_job(e) from None
        self.nodes, self.n_contrib = outcome.nodes, outcome.contributors

    # --- training -------------------------------------------------------------------------------

    def inner_step(self) -> torch.Tensor:
        x, y = (t.to(self.device) for t in self.data.next(self.args.batch_size))
        loss = self.model(x, y)
        loss.backward()
        return loss

    def optimizer_step(self) -> None:
        torch.nn.utils.clip_grad_norm_(self.params, 1.0)
        self.opt.step()
        self.opt.zero_grad(set_to_none=False)

    @torch.no_grad()
    def eval_loss(self) -> float:
        return float(self.model(self.eval_x, self.eval_y))

    def tokens_per_inner_step(self, nodes: int) -> int:
        return nodes * self.local_size * self.args.batch_size * self.args.seq_len

    def topk_keep(self, wire: "wccl.Wire") -> int:
        """The elements the TOPK wire keeps per block (--topk-keep, else its default 8), 0 for another
        wire: the option the all-reduce and the roundtrip take, and what the fingerprint holds."""
        return (self.args.topk_keep or wccl.TOPK_DEFAULT_KEEP) if wire == wccl.Wire.TOPK else 0

    def reduce(self, send: torch.Tensor, out: torch.Tensor, op, wire) -> "wccl.OpStats":
        """All-reduce over the nodes, updating and retrying with the same input until it commits."""
        while True:
            stats = self.mesh.allreduce(send, out, op, wire, self.topk_keep(wire))
            if stats is not None:
                return stats
            self.settle(need_update=True)

    def kill_node(self, send: torch.Tensor, out: torch.Tensor) -> None:
        """--fault-kill-at-step: local rank 0 puts its all-reduce in flight, then SIGKILLs the node's
        processes (the other ranks, the launcher, itself) as a crash would. The other ranks never
        start theirs, so with two or more local ranks the step cannot commit with this node in every
        group, however fast the all-reduce is: it always commits without it (were every rank's
        all-reduce in flight, a small model's could finish, commit included, before the kill lands)."""
        in_flight = None
        if self.local_rank == 0:
            in_flight = self.mesh.comm.allreduce(  # noqa: F841 (held until the kill)
                send, wccl.ReduceOp.SUM, out=out, wire=WIRES[self.args.wire],
                topk_keep=self.topk_keep(WIRES[self.args.wire]), async_op=True)
        self.mesh.agree(True)
        if self.local_rank == 0:
            for pid in [p for p in self.pids if p != os.getpid()] + [os.getppid(), os.getpid()]:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        signal.pause()  # until local rank 0's SIGKILL, microseconds away

    def run(self) -> None:
        args = self.args
        log = Log(args, self)
        if args.resume:
            self.resume()
        if args.mode == "sync":
            t = time.time()
            self.settle(need_update=False)
            self.pos.in_job, self.pos.loop_epoch = True, self.pos.epoch
            self.startup["state_sync_s"] = time.time() - t
            self.joined(log)
            self.run_sync(log)
        else:
            try:
                membership.run(membership.diloco(self.pos, self.mesh.node_id, syncs=args.outer_steps * args.fragments,
                                                 fragments=args.fragments, fingerprint=self.fingerprint),
                               DilocoCalls(self, log))
            except (membership.Refused, membership.Stopped) as e:
                raise self.exit_from_job(e) from None
            # The job's model is the outer parameters: fragments synchronised earlier in the last outer
            # step, and a mixed fragment, hold local progress that differs between nodes.
            self.load_shard(self.outer)
        log.final(self.node_hash(), self.eval_loss())
        self.mesh.leave()

    def joined(self, log: "Log") -> None:
        self.data.reseed(data_seed(self.args.seed, self.args.node_name, self.pos.step, self.local_rank))
        log.joined()

    def inner_step_and_update(self) -> torch.Tensor:
        loss = self.inner_step()
        self.optimizer_step()
        return loss.detach()

    def run_sync(self, log: "Log") -> None:
        args, pos = self.args, self.pos
        wire = WIRES[args.sync_wire]
        avg = None
        while pos.step < args.outer_steps:
            t0 = time.perf_counter()
            losses, allreduce_s, bytes_sent, epoch = [], 0.0, 0, 0
            for _ in range(args.inner_steps):
                losses.append(float(self.inner_step()))
                grads = self.grad_vector()
                avg = torch.empty_like(grads) if avg is None else avg
                a0 = time.perf_counter()
                self.mesh.uncommitted_bytes_sent = 0
                stats = self.reduce(grads, avg, wccl.ReduceOp.AVG, wire)
                allreduce_s += time.perf_counter() - a0
                bytes_sent += stats.bytes_sent + self.mesh.uncommitted_bytes_sent
                epoch = stats.epoch
                self.load_grads(avg)
                self.optimizer_step()
            pos.step += 1
            self.counters[0] += self.tokens_per_inner_step(self.nodes) * args.inner_steps
            self.counters[1] += args.inner_steps
            t1 = time.perf_counter()
            log.step(sum(losses) / len(losses), self.eval_loss(), inner_s=t1 - t0 - allreduce_s, outer_s=0.0,
                     allreduce_s=allreduce_s, bytes_sent=self.mesh.node_sum(bytes_sent), contributors=self.nodes,
                     nodes=self.nodes, epoch=epoch)

    def node_hash(self) -> str:
        """SHA-256 over the local ranks' hashes of their model shards, in local rank order."""
        mine = flat_hash([p.to_local() for p in self.params])
        hashes = [None] * self.local_size
        dist.all_gather_object(hashes, mine, group=self.mesh.local_group)
        return hashlib.sha256("".join(hashes).encode()).hexdigest()


class DilocoCalls:
    """Makes the calls of membership.diloco, the DiLoCo loop's rules (streaming with --fragments /
    --overlap: every H/P inner steps one fragment of the shard, in turn, is synchronised; pos.step
    counts those syncs, P per outer step; a sync's all-reduce may run while the next --overlap
    inner steps do)."""

    def __init__(self, trainer: Trainer, log: "Log") -> None:
        self.t, self.log, self.args = trainer, log, trainer.args
        self.wire = WIRES[self.args.wire]
        self.per_sync = self.args.inner_steps // self.args.fragments
        self.syncs = self.args.outer_steps * self.args.fragments
        self.bounds = fragment_bounds(trainer.shard_size, self.args.fragments)
        largest = max(hi - lo for lo, hi in self.bounds)
        self.delta_buf, self.avg_buf = torch.zeros(largest), torch.empty(largest)
        self.ahead: List[float] = []  # losses of the inner steps already run for the next sync (overlapped)
        self.probe_in, self.probe_out = torch.zeros(1), torch.zeros(1)  # joiners waiting, per node and in all
        self.settle_started = time.time()
        self.stats: "wccl.OpStats | None" = None
        self.fragment, self.bytes_sent = 0, 0.0
        self.overlap_s = 0.0  # the last overlapped sync's: time of its overlapped inner steps
        self.pace_rate = 0  # the current sync's max_link_rate (--pace), bytes per second
        self.next_sync()
        self.t2 = self.t0

    def views(self) -> Tuple[int, int, int, torch.Tensor, torch.Tensor]:
        """The current sync's fragment, its elements [lo, hi), and its pseudo-gradient and result buffers."""
        fragment = self.t.pos.step % self.args.fragments
        lo, hi = self.bounds[fragment]
        return fragment, lo, hi, self.delta_buf[:hi - lo], self.avg_buf[:hi - lo]

    def __call__(self, c: "membership.Call"):
        t, args = self.t, self.args
        if isinstance(c, (membership.Update, membership.Roster, membership.Sync, membership.Wait)):
            return t.membership_call(c)
        if isinstance(c, membership.Joined):
            t.startup["state_sync_s"] = time.time() - self.settle_started
            t.joined(self.log)
            self.next_sync()
            return None
        if isinstance(c, membership.Train):  # (again, if every node that trained the sync was lost)
            self.t0, self.reducing = time.perf_counter(), False
            losses = self.ahead + [float(t.inner_step_and_update()) for _ in range(self.per_sync - len(self.ahead))]
            self.ahead, self.overlapped = [], 0
            self.train_loss = sum(losses) / len(losses)
            _, lo, hi, delta, _ = self.views()
            torch.sub(t.outer[lo:hi], t.shard_vector(lo, hi), out=delta)  # the pseudo-gradient
            if c.step == args.fault_nan_at_step and t.local_rank == 0:
                delta[0] = float("nan")
            finite = t.mesh.agree(bool(torch.isfinite(delta).all()))
            if finite and t.residual is not None:
                feed_back(delta, t.residual[lo:hi], self.wire, t.topk_keep(self.wire))
            return finite
        if isinstance(c, membership.Discard):
            print(f"[{args.node_name}] pseudo-gradient of step {t.pos.step + 1} is not finite: this node sits the "
                  "step out", file=sys.stderr, flush=True)
            t.load_shard(t.outer)
            t.opt.state.clear()  # AdamW's moments may hold the NaN too
            return None
        if isinstance(c, membership.Reduce):
            if not self.reducing:  # the sync's inner part (its training, a settle after a NaN) ends here
                self.reducing, self.t1 = True, time.perf_counter()
                self.inner_s = self.t1 - self.t0
            if c.step == args.fault_kill_at_step:
                t.kill_node(*self.views()[3:])
            _, _, _, delta, avg = self.views()  # a settle may have brought this node to another sync
            if not c.send:
                delta.zero_()  # admitted (or brought up to date) at this sync's all-reduce: adds nothing
            overlap = not self.ahead and args.overlap > 0 and c.step + 1 < self.syncs
            self.pace_rate = self.pace() if overlap else 0
            pending = t.mesh.allreduce_start(delta, avg, wccl.ReduceOp.SUM, self.wire, t.topk_keep(self.wire),
                                             max_link_rate=self.pace_rate)
            probe = None
            if overlap and c.step % args.fragments == args.fragments - 1:
                # The last sync of an outer step, overlapped: a one-element all-reduce of the nodes'
                # waiting joiners travels with it, so the boundary's roster (a round trip the compute
                # would wait for) is taken only when a node waits to be admitted.
                self.probe_in[0] = t.mesh.groups().pending
                # (At the fragment's rate: a rate of 0 would unpace the fragment's bytes still queued.)
                probe = t.mesh.allreduce_start(self.probe_in, self.probe_out, wccl.ReduceOp.SUM, wccl.Wire.NATIVE,
                                               max_link_rate=self.pace_rate)
            if overlap:
                o0 = time.perf_counter()
                self.ahead = [float(t.inner_step_and_update()) for _ in range(args.overlap)]
                self.overlap_s = time.perf_counter() - o0
                self.inner_s += self.overlap_s
                self.overlapped = args.overlap
            self.stats = pending.wait()
            waiting = None if probe is None or probe.wait() is None else int(self.probe_out[0])
            self.t2 = time.perf_counter()
            return self.stats is not None, waiting
        if isinstance(c, membership.Commit):
            self.fragment = c.sync % args.fragments
            lo, hi = self.bounds[self.fragment]
            if c.divisor > 0:
                # Nesterov SGD on the fragment's outer parameters, as torch.optim.SGD(nesterov=True) does it.
                g, momentum, outer = self.avg_buf[:hi - lo].div_(c.divisor), t.momentum[lo:hi], t.outer[lo:hi]
                momentum.mul_(args.outer_momentum).add_(g)
                outer.sub_(g.add_(momentum, alpha=args.outer_momentum), alpha=args.outer_lr)
                t.counters[0] += t.tokens_per_inner_step(c.divisor) * self.per_sync
                t.counters[1] += self.per_sync
            t.load_shard(t.outer[lo:hi], lo, mix=args.mix)
            if args.checkpoint_dir and c.divisor > 0 and t.pos.step % (args.checkpoint_every * args.fragments) == 0:
                t.save_checkpoint()
            # What this sync cost the link, failed attempts included.
            self.bytes_sent = t.mesh.node_sum(self.stats.bytes_sent + t.mesh.uncommitted_bytes_sent)
            t.mesh.uncommitted_bytes_sent = 0
            if c.divisor == 0:
                self.next_sync()  # no Record follows
            return None
        assert isinstance(c, membership.Record), c
        t3 = time.perf_counter()
        self.log.step(self.train_loss, t.eval_loss(), inner_s=self.inner_s, outer_s=t3 - self.t0 - self.inner_s,
                      allreduce_s=self.t2 - self.t1, bytes_sent=self.bytes_sent, contributors=c.contributors,
                      nodes=c.nodes, epoch=self.stats.epoch, fragment=self.fragment, overlapped=self.overlapped,
                      max_link_rate=self.pace_rate)
        self.next_sync()
        return None

    def pace(self) -> int:
        """--pace's max_link_rate for an overlapped all-reduce: this rank's bytes of the last
        sync's all-reduce (the fragments differ by at most one element) over F times the time of
        the last overlapped sync's inner steps; 0 (unpaced) before both are known, after a failed
        attempt, and when the last all-reduce ran among another number of nodes or sent nothing
        (a node alone), whose bytes say nothing of this one's."""
        s, comm = self.stats, self.t.mesh.comm
        if (not self.args.pace or s is None or not self.overlap_s or not s.bytes_sent or comm is None
                or s.world_size != comm.size):
            return 0
        return max(wccl.MIN_LINK_RATE, round(s.bytes_sent / (self.args.pace * self.overlap_s)))

    def next_sync(self) -> None:
        """The next sync's clock starts: a node that does not train it (admitted at its all-reduce)
        logs no training loss and no inner time."""
        self.t0 = self.t1 = time.perf_counter()
        self.train_loss, self.overlapped, self.inner_s, self.reducing = float("nan"), 0, 0.0, False


class Log:
    """Local rank 0's output: a progress bar, one line per outer step, and the JSONL metrics."""

    def __init__(self, args, trainer: Trainer) -> None:
        self.args, self.t = args, trainer
        self.lead = trainer.local_rank == 0
        self.start = time.time()
        self.file = open(args.metrics, "a" if restarted() else "w") if (self.lead and args.metrics) else None
        self.exporter = None
        if self.lead and args.metrics_port is not None:
            from prometheus_export import Exporter
            self.exporter = Exporter(args.metrics_host, args.metrics_port, args.node_name)
            print(f"[{args.node_name}] metrics on http://{args.metrics_host}:{self.exporter.port}/metrics", flush=True)
        self.bar = None
        if self.lead and not args.no_progress:
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=args.outer_steps, desc=f"{args.node_name} outer steps", unit="step", file=sys.stderr)
            except ImportError:
                pass

    def write(self, record: dict, line: str) -> None:
        if not self.lead:
            return
        if self.file:
            record = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}
            record["unix_time"] = time.time()
            self.file.write(json.dumps(record, allow_nan=False) + "\n")
            self.file.flush()
        (self.bar.write if self.bar else print)(line)
        sys.stdout.flush()

    def joined(self) -> None:
        t = self.t
        self.write({"event": "joined", "node": self.args.node_name, "mode": self.args.mode, "step": t.pos.step,
                    "nodes": t.nodes, "params": t.n_params, "device": str(t.device), "numerics": t.numerics,
                    **t.startup,
                    "time": time.time() - self.start},
                   f"[{self.args.node_name}] joined at outer step {t.pos.step}: {t.nodes} nodes, "
                   f"{t.n_params} parameters over {t.local_size} local ranks")
        if self.bar:
            self.bar.update(t.pos.step)

    def step(self, train_loss, eval_loss, *, inner_s, outer_s, allreduce_s, bytes_sent, contributors, nodes, epoch,
             fragment=0, overlapped=0, max_link_rate=0) -> None:
        """One committed sync (diloco: of ``fragment``, with ``overlapped`` inner steps run during
        its all-reduce, paced at ``max_link_rate`` bytes per second per link, 0 unpaced) or one
        outer step of the baseline."""
        t, a = self.t, self.args
        tokens = t.tokens_per_inner_step(contributors) * (a.inner_steps // a.fragments)
        elapsed = inner_s + outer_s if a.mode == "diloco" else inner_s + allreduce_s
        record = {"event": "step", "mode": a.mode, "node": a.node_name, "step": t.pos.step, "train_loss": train_loss,
                  "eval_loss": eval_loss, "tokens": int(t.counters[0]), "tokens_per_s": tokens / max(elapsed, 1e-9),
                  "inner_s": inner_s, "outer_s": outer_s, "allreduce_s": allreduce_s,
                  "utilisation": inner_s / max(elapsed, 1e-9), "fragment": fragment, "overlapped": overlapped,
                  "max_link_rate": max_link_rate,
                  "bytes_sent": int(bytes_sent), "nodes": nodes, "contributors": contributors, "epoch": epoch,
                  "time": time.time() - self.start,
                  "wire": a.wire if a.mode == "diloco" else a.sync_wire}
        if self.exporter:
            self.exporter.step(record, t.mesh.comm)
        where = (f" fragment {fragment} overlap {overlapped} util {record['utilisation']:.2f}"
                 if a.fragments > 1 or a.overlap > 0 else "")
        where += f" pace {max_link_rate * 8 / 1e6:.1f} Mbit/s" if max_link_rate else ""
        self.write(record, f"[{a.node_name}] step {t.pos.step}/{a.outer_steps * a.fragments}{where} loss {train_loss:.4f} "
                           f"eval {eval_loss:.4f} tok/s {record['tokens_per_s']:.0f} inner {inner_s:.2f}s outer "
                           f"{outer_s:.2f}s all-reduce {allreduce_s:.3f}s sent {bytes_sent / 1e6:.2f} MB nodes {nodes} "
                           f"epoch {epoch}")
        if self.bar:
            self.bar.update(1)

    def final(self, node_hash: str, eval_loss: float) -> None:
        """The job's model at the end (DiLoCo: the outer parameters), its hash and held-out loss."""
        t = self.t
        self.write({"event": "final", "mode": self.args.mode, "node": self.args.node_name, "step": t.pos.step,
                    "tokens": int(t.counters[0]), "hash": node_hash, "eval_loss": eval_loss,
                    "time": time.time() - self.start},
                   f"[{self.args.node_name}] done at outer step {t.pos.step}: model hash {node_hash[:16]}")
        if self.bar:
            self.bar.close()
        if self.file:
            self.file.close()
        if self.exporter:
            self.exporter.close()


def main(argv=None) -> None:
    args = parse_args(argv)
    if (args.checkpoint_dir or args.resume) and args.mode != "diloco":
        raise SystemExit("--checkpoint-dir and --resume are for --mode diloco (the baseline's state is its model)")
    if args.resume and not args.checkpoint_dir:
        raise SystemExit("--resume needs --checkpoint-dir")
    if args.checkpoint_every < 1:
        raise SystemExit("--checkpoint-every must be at least 1")
    if args.fragments < 1 or args.inner_steps % args.fragments:
        raise SystemExit(f"--fragments {args.fragments}: must be at least 1 and divide --inner-steps {args.inner_steps}")
    if not 0 <= args.overlap <= args.inner_steps // args.fragments:
        raise SystemExit(f"--overlap {args.overlap}: from 0 to H/P = {args.inner_steps // args.fragments} inner steps")
    if not 0.0 <= args.pace <= 1.0 or (args.pace and not args.overlap):
        raise SystemExit(f"--pace {args.pace}: from 0 (unpaced) to 1, with --overlap")
    if not 0.0 <= args.mix < 1.0:
        raise SystemExit(f"--mix {args.mix}: from 0 (take the outer parameters) to below 1")
    mode_wire = args.wire if args.mode == "diloco" else args.sync_wire
    if args.topk_keep is not None and not (1 <= args.topk_keep <= 64 and mode_wire == "topk"):
        raise SystemExit(f"--topk-keep {args.topk_keep}: 1..64, with the topk wire of --mode {args.mode} "
                         f"({'--wire' if args.mode == 'diloco' else '--sync-wire'} is {mode_wire})")
    if args.mode == "sync" and (args.fragments != 1 or args.overlap or args.mix or args.pace):
        raise SystemExit("--fragments, --overlap, --mix and --pace are for --mode diloco")
    if args.tls == "on" and not (args.tls_cert and args.tls_key and args.tls_ca):
        raise SystemExit("--tls on needs --tls-cert, --tls-key and --tls-ca (docs/tls.md), or --tls off")
    dist.init_process_group("nccl" if args.device == "cuda" else "gloo")
    if args.device == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    torch.set_num_threads(max(1, int(os.environ.get("OMP_NUM_THREADS", "1"))))
    try:
        Trainer(args).run()
    except MembershipError as e:  # not admitted in time, a refused certificate, a coordinator gone for good
        raise SystemExit(f"[{args.node_name}] {e}") from None
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
