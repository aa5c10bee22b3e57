#!/usr/bin/env python3
"""Churn soak: a group of churn-member processes (tests/churn_member.c: update, state sync and a
verified all-reduce per step, as a training loop drives wccl) under random faults, over TLS.

Every 0.5-2 s one action, chosen at random: SIGKILL a member (35%, keeping at least two alive),
SIGSTOP one for 0.2-8 s then SIGCONT (15%: often longer than peer_timeout_ms, so it is declared
lost and re-admitted by its next update), or start a new member (the rest, up to 8 alive). After
--duration seconds the faults stop (frozen members are resumed) and every live member must commit
a new step within --recover seconds. Any wrong element, any member error line, or a member that
does not commit again fails the soak; it prints the seed, which reproduces the schedule.

The coordinator writes its events log (events_log); each fault must appear there once, with its
cause: a member killed is lost once as "disconnected", a member frozen well past peer_timeout_ms
(awake for 3 s before) is lost once as "silent" within its freeze, one frozen well short of it is
not lost, and nobody else is lost; every member admitted appears as registered and admitted.

  churn_soak.py --member build/tests/wccl-test-churn-member --coord build/tools/wccl-coord \
      [--duration 60] [--seed N] [--members 4] [--recover 60]
"""

import argparse
import datetime
import json
import os
import random
import signal
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tools" / "devkit"))
from group import Group, make_pki, start_coordinator  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--member", required=True)
    ap.add_argument("--coord", required=True)
    ap.add_argument("--duration", type=float, default=60)
    ap.add_argument("--recover", type=float, default=60)
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--members", type=int, default=4)
    ap.add_argument("--max-members", type=int, default=8)
    ap.add_argument("--count", type=int, default=256 << 10)
    ap.add_argument("--tls", default="on")
    args = ap.parse_args()
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(1 << 31)
    rng = random.Random(seed)
    print(f"churn soak: seed {seed}, {args.duration:.0f} s of faults, tls {args.tls}", flush=True)
    tmp = Path(tempfile.mkdtemp(prefix="wccl-soak-"))
    env = dict(os.environ)
    env["WCCL_TLS"] = args.tls
    if args.tls == "on":
        env.update({f"WCCL_{k}": v for k, v in make_pki(tmp).items()})
    env["WCCL_LOG_LEVEL"] = "warn"
    events_log = tmp / "events.jsonl"
    coord, port = start_coordinator(args.coord, dict(env, WCCL_MIN_PEERS=str(args.members), WCCL_EVENTS_LOG=str(events_log)),
                                    tmp / "coord.log")
    env.update(WCCL_COORDINATOR=f"127.0.0.1:{port}", WCCL_LISTEN="127.0.0.1:0", WCCL_JOIN_TIMEOUT_MS="600000")
    group = Group(args.member, args.count, env, tmp)
    members, start, live = group.members, group.start, group.live

    for _ in range(args.members):
        start()
    counts = {"kill": 0, "freeze": 0, "join": 0}
    kills = {}  # name -> wall time of its SIGKILL
    freezes = {}  # name -> [[wall time of SIGSTOP, of SIGCONT, admitted before it], ...]

    def resume(m):
        m.signal(signal.SIGCONT)
        m.frozen_until = None
        freezes[m.name][-1][1] = time.time()

    end = time.monotonic() + args.duration
    failed = []
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.5, 2.0))
        now = time.monotonic()
        for m in live():
            if m.frozen_until is not None and now >= m.frozen_until:
                resume(m)
        alive = live()
        roll = rng.random()
        if roll < 0.35:
            if len(alive) > 2:
                victim = rng.choice(alive)
                victim.signal(signal.SIGKILL)
                kills[victim.name] = time.time()
                counts["kill"] += 1
        elif roll < 0.50:
            awake = [m for m in alive if m.frozen_until is None]
            if awake:
                victim = rng.choice(awake)
                victim.signal(signal.SIGSTOP)
                victim.frozen_until = now + rng.uniform(0.2, 8.0)
                freezes.setdefault(victim.name, []).append([time.time(), None, victim.joined is not None])
                counts["freeze"] += 1
        elif len(alive) < args.max_members:
            start()
            counts["join"] += 1
    faults_end = time.monotonic()
    for m in live():
        if m.frozen_until is not None:
            resume(m)
    print(f"faults over: {counts['kill']} kills, {counts['freeze']} freezes, {counts['join']} joins; "
          f"{len(live())} members alive", flush=True)
    # Liveness: every live member commits a step begun after the faults ended.
    deadline = faults_end + args.recover
    while time.monotonic() < deadline:
        if all(m.last_commit is not None and m.last_commit[0] > faults_end for m in live()):
            break
        if any(m.errors for m in members):
            break
        time.sleep(0.2)
    recovered = time.monotonic() - faults_end
    stalled = [m for m in live() if m.last_commit is None or m.last_commit[0] <= faults_end]
    for m in members:
        if m.wrong:
            failed.append(f"{m.name}: {m.wrong} wrong elements")
        for e in m.errors:
            failed.append(f"{m.name}: {e}")
    if stalled:
        failed.append(f"no commit within {args.recover:.0f} s after the faults ended: "
                      + ", ".join(m.name for m in stalled))
    failed += check_events(events_log, members, kills, freezes, peer_timeout=5.0)
    total = sum(m.commits for m in members)
    steps = max((m.last_commit[1] for m in members if m.last_commit), default=-1)
    print(f"{total} commits, last step {steps}; all live members committed {recovered:.1f} s after the faults ended"
          if not stalled else f"{total} commits, last step {steps}", flush=True)
    if failed:
        print("FAILED (seed %d):" % seed)
        for f in failed:
            print("  " + f)
        for m in stalled:
            print(f"--- {m.name} (joined: {m.joined is not None}), last output:")
            for line in m.lines[-5:]:
                print("   ", line)
            print(f"--- {m.name} log tail:")
            print("".join(open(tmp / f"{m.name}.log").readlines()[-15:]))
    for m in members:
        m.signal(signal.SIGKILL)
    coord.terminate()
    for m in members:
        m.proc.wait()
    coord.wait()
    print("logs in", tmp)
    return 1 if failed else 0


def check_events(path, members, kills, freezes, peer_timeout):
    """What the events log says against the faults the soak injected (wall times); the failures."""
    events = [json.loads(line) for line in open(path)]
    for e in events:
        if "time" in e:
            e["t"] = datetime.datetime.fromisoformat(e["time"].replace("Z", "+00:00")).timestamp()
    failed = []
    if not events or events[0]["event"] != "started":
        failed.append("events log: the first line is not the coordinator's start")
    lost = {}
    for e in events:
        if e["event"] == "lost":
            lost.setdefault(e["name"], []).append(e)
    margin = 1.5  # s: the coordinator's tick, a loaded machine's scheduling
    for m in members:
        losses = lost.get(m.name, [])
        kinds = [e["cause"] for e in losses]
        if m.name not in kills and m.name not in freezes and losses:
            failed.append(f"events log: {m.name}, never killed nor frozen, was lost: {kinds}")
        for e in losses:
            if e["cause"] not in ("disconnected", "silent", "probe"):
                failed.append(f"events log: {m.name} lost for an unexpected cause: {e}")
            if e["cause"] == "disconnected" and m.name not in kills:
                failed.append(f"events log: {m.name} lost as disconnected, but it was never killed")
        if kinds.count("disconnected") > 1:
            failed.append(f"events log: {m.name} lost as disconnected {kinds.count('disconnected')} times")
        if m.name in kills and m.name not in freezes and m.joined is not None and kinds != ["disconnected"]:
            failed.append(f"events log: {m.name}, killed once after it joined, has losses {kinds}")
        kill = kills.get(m.name, float("inf"))
        awake_since = float("-inf")
        for start, end, admitted in freezes.get(m.name, []):
            end = end if end is not None else kill
            isolated = start - awake_since >= 3.0
            awake_since = end
            # Skipped: a member maybe not registered yet; one killed before its loss could be told
            # apart; one awake for less than 3 s before (its silence began in the freeze before,
            # or it may not be registered again after a loss in it).
            if not admitted or end + margin > kill or not isolated:
                continue
            silent = [e for e in losses if e["cause"] == "silent" and start <= e["t"] <= end + margin]
            if end - start >= peer_timeout + margin and len(silent) != 1:
                failed.append(f"events log: {m.name} frozen {end - start:.1f} s: {len(silent)} silent losses in it")
            if end - start <= peer_timeout - margin and silent:
                failed.append(f"events log: {m.name} frozen only {end - start:.1f} s, yet lost as silent")
        if m.joined is not None:
            said = {e["event"] for e in events if e.get("name") == m.name}
            if not {"registered", "admitted"} <= said:
                failed.append(f"events log: {m.name} joined, but the log has only {sorted(said)} for it")
    causes = [e["cause"] for es in lost.values() for e in es]
    print(f"events log: {len(events)} lines; lost: " +
          ", ".join(f"{causes.count(c)} {c}" for c in sorted(set(causes))), flush=True)
    return failed


if __name__ == "__main__":
    sys.exit(main())
