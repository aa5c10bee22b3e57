#!/usr/bin/env python3
"""Recovery time: for each kind of fault, the time from the fault to the group's next committed
operation, over many faults, on 127.0.0.1 with TLS. The members run the training loop of the churn
soak (tests/churn_member.c: update, state sync of a step counter, verified all-reduce of COUNT F32
per step) and print a line per committed step; this script injects one fault at a time into a
steady group of --members and times what the members print.

  kill    SIGKILL a member; until a survivor commits in an epoch without it
          (then a replacement starts, which is also a "join" sample)
  freeze  SIGSTOP a member for longer than peer_timeout_ms; until a survivor commits without it
          (then SIGCONT: its next update re-admits it)
  coord   SIGKILL the coordinator and start a new one on the same port at once; until a member
          commits again (members reconnect with backoff and rejoin with their epoch)
  join    a new member process starts; until it is admitted ("joined") and until its first commit

  recovery_time.py --member build/tests/wccl-test-churn-member --coord build/tools/wccl-coord \
      [--faults 50] [--kinds kill,freeze,coord] [--peer-timeout-ms 5000] [--json out.json]
"""

import argparse
import json
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools" / "devkit"))
from group import Group, make_pki, start_coordinator  # noqa: E402


MEMBERS = []  # the group, for wait_for's check of member errors


def wait_for(pred, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        for m in (m for g in MEMBERS for m in g.members):
            if m.errors:
                raise RuntimeError(f"{m.name}: {m.errors[0]}")
        v = pred()
        if v:
            return v
        time.sleep(0.002)
    raise TimeoutError(what)


def quantile(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(q * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--member", required=True)
    ap.add_argument("--coord", required=True)
    ap.add_argument("--faults", type=int, default=50)
    ap.add_argument("--kinds", default="kill,freeze,coord")
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--count", type=int, default=256 << 10)
    ap.add_argument("--peer-timeout-ms", type=int, default=5000)
    ap.add_argument("--heartbeat-ms", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    tmp = Path(tempfile.mkdtemp(prefix="wccl-recovery-"))
    env = dict(os.environ, WCCL_TLS="on", WCCL_LOG_LEVEL=os.environ.get("WCCL_LOG_LEVEL", "error"), WCCL_PEER_TIMEOUT_MS=str(args.peer_timeout_ms),
               WCCL_HEARTBEAT_MS=str(args.heartbeat_ms))
    env.update({f"WCCL_{k}": v for k, v in make_pki(tmp).items()})
    coord_env = dict(env, WCCL_MIN_PEERS=str(args.members))
    coord, port = start_coordinator(args.coord, coord_env, tmp / "coord.log")
    env.update(WCCL_COORDINATOR=f"127.0.0.1:{port}", WCCL_LISTEN="127.0.0.1:0")
    group = Group(args.member, args.count, env, tmp)
    members, start, live = group.members, group.start, group.live
    MEMBERS.append(group)
    samples = {k: [] for k in ["kill", "freeze", "coord", "join_admitted", "join_committed"]}

    def steady():
        # Every live member committed within the last second, all in one epoch of full size.
        now = time.monotonic()
        ms = live()
        if len(ms) != args.members:
            return False
        last = [m.last_commit for m in ms]
        return all(c is not None and now - c[0] < 1.0 and c[3] == args.members for c in last) and \
            len({c[2] for c in last}) == 1

    def next_commit_without(victim, t0, epoch0):
        def found():
            hits = [c for m in live() if m is not victim for c in list(m.history)
                    if c[0] > t0 and c[2] > epoch0 and c[3] == args.members - 1]
            return min(c[0] for c in hits) if hits else None
        return wait_for(found, 60 + args.peer_timeout_ms / 1000, "no commit after the fault") - t0

    def join_one():
        t0 = time.monotonic()
        j = start()
        wait_for(lambda: j.joined, 60, "the joiner was not admitted")
        first = wait_for(lambda: j.history[0][0] if j.history else None, 60, "the joiner did not commit")
        samples["join_admitted"].append(j.joined - t0)
        samples["join_committed"].append(first - t0)

    for _ in range(args.members):
        start()
    wait_for(steady, 120, "the group did not form")
    kinds = args.kinds.split(",")
    for i in range(args.faults):
        for kind in kinds:
            wait_for(steady, 120, f"not steady before {kind} #{i}")
            time.sleep(rng.uniform(0.05, 0.5))
            epoch0 = max(m.last_commit[2] for m in live())
            if kind == "kill":
                victim = rng.choice(live())
                t0 = time.monotonic()
                victim.signal(signal.SIGKILL)
                samples["kill"].append(next_commit_without(victim, t0, epoch0))
                join_one()
            elif kind == "freeze":
                victim = rng.choice(live())
                t0 = time.monotonic()
                victim.signal(signal.SIGSTOP)
                samples["freeze"].append(next_commit_without(victim, t0, epoch0))
                victim.signal(signal.SIGCONT)
            elif kind == "coord":
                t0 = time.monotonic()
                coord.send_signal(signal.SIGKILL)
                coord.wait()
                coord, _ = start_coordinator(args.coord, coord_env, tmp / "coord.log", port)
                up = time.monotonic()  # commits that arrive before were decided by the old one
                first = wait_for(lambda: min((c[0] for m in live() for c in list(m.history) if c[0] > up),
                                             default=None), 120, "no commit after the coordinator restart")
                samples["coord"].append(first - t0)
        print(f"fault round {i + 1}/{args.faults}: " + ", ".join(f"{k} {v[-1]:.3f} s" for k, v in samples.items() if v),
              file=sys.stderr, flush=True)
    for m in members:
        m.signal(signal.SIGKILL)
    coord.terminate()
    print(f"recovery time on 127.0.0.1, TLS, {args.members} members, {args.count} F32 per all-reduce, "
          f"peer_timeout_ms {args.peer_timeout_ms}, heartbeat_ms {args.heartbeat_ms}")
    print(f"| {'fault':<26} | {'n':>3} | {'median s':>8} | {'p99 s':>7} | {'max s':>7} | p99/median |")
    print(f"|{'-' * 28}|{'-' * 5}|{'-' * 10}|{'-' * 9}|{'-' * 9}|{'-' * 12}|")
    out = {}
    for k, xs in samples.items():
        if not xs:
            continue
        med, p99 = statistics.median(xs), quantile(xs, 0.99)
        out[k] = {"n": len(xs), "median_s": med, "p99_s": p99, "max_s": max(xs), "samples_s": xs}
        print(f"| {k:<26} | {len(xs):>3} | {med:>8.3f} | {p99:>7.3f} | {max(xs):>7.3f} | {p99 / med:>10.2f} |")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
