#!/usr/bin/env python3
"""Churn soak: a group of churn-member processes (tests/churn_member.c: update, state sync and a
verified all-reduce per step, as a training loop drives wccl) under random faults, over TLS.

Every 0.5-2 s one action, chosen at random: SIGKILL a member (35%, keeping at least two alive),
SIGSTOP one for 0.2-8 s then SIGCONT (15%: often longer than peer_timeout_ms, so it is declared
lost and re-admitted by its next update), or start a new member (the rest, up to 8 alive). After
--duration seconds the faults stop (frozen members are resumed) and every live member must commit
a new step within --recover seconds. Any wrong element, any member error line, or a member that
does not commit again fails the soak; it prints the seed, which reproduces the schedule.

  churn_soak.py --member build/tests/wccl-test-churn-member --coord build/tools/wccl-coord \
      [--duration 60] [--seed N] [--members 4] [--recover 60]
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path


def make_pki(d):
    def run(*args):
        subprocess.run(["openssl", *args], cwd=d, check=True, capture_output=True, timeout=60)

    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "ca.key")
    run("req", "-x509", "-new", "-key", "ca.key", "-sha256", "-days", "2", "-subj", "/O=wccl-soak/CN=ca",
        "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign", "-out", "ca.pem")
    (d / "node.ext").write_text("basicConstraints=critical,CA:FALSE\nkeyUsage=critical,digitalSignature\n"
                                "extendedKeyUsage=serverAuth,clientAuth\n")
    run("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", "node.key")
    run("req", "-new", "-key", "node.key", "-subj", "/O=wccl-soak/CN=node", "-out", "node.csr")
    run("x509", "-req", "-in", "node.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial", "-days", "2",
        "-sha256", "-extfile", "node.ext", "-out", "node.pem")
    return {"TLS_CERT": str(d / "node.pem"), "TLS_KEY": str(d / "node.key"), "TLS_CA": str(d / "ca.pem")}


class Member:
    def __init__(self, name, cmd, env, logdir):
        self.name = name
        self.log = open(logdir / f"{name}.log", "w")
        self.proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=self.log, text=True)
        self.started = time.monotonic()
        self.joined = None
        self.last_commit = None  # (time, step, epoch, size)
        self.commits = 0
        self.wrong = 0
        self.errors = []
        self.frozen_until = None
        self.lines = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            now = time.monotonic()
            self.lines.append(line.rstrip())
            del self.lines[:-20]
            f = line.split()
            if f and f[0] == "joined":
                self.joined = now
            elif f and f[0] == "commit" and len(f) == 6:
                self.last_commit = (now, int(f[1]), int(f[2]), int(f[3]))
                self.commits += 1
                self.wrong += int(f[5])
            elif f and f[0] == "error":
                self.errors.append(line.rstrip())

    def alive(self):
        return self.proc.poll() is None

    def signal(self, sig):
        try:
            self.proc.send_signal(sig)
        except ProcessLookupError:
            pass


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
    coord_env = dict(env, WCCL_LISTEN="127.0.0.1:0", WCCL_MIN_PEERS=str(args.members))
    coord_log = open(tmp / "coord.log", "w")
    coord = subprocess.Popen([args.coord], env=coord_env, stdout=subprocess.PIPE, stderr=coord_log, text=True)
    port = None
    for line in coord.stdout:
        if "listening on port" in line:
            port = int(line.split()[-1])
            break
    if port is None:
        print("the coordinator did not start; see", tmp / "coord.log")
        return 1
    env.update(WCCL_COORDINATOR=f"127.0.0.1:{port}", WCCL_LISTEN="127.0.0.1:0", WCCL_JOIN_TIMEOUT_MS="600000")
    members = []

    def start():
        m = Member(f"p{len(members)}", [args.member, str(args.count)], dict(env, WCCL_NAME=f"p{len(members)}"), tmp)
        members.append(m)
        return m

    def live():
        return [m for m in members if m.alive()]

    for _ in range(args.members):
        start()
    counts = {"kill": 0, "freeze": 0, "join": 0}
    end = time.monotonic() + args.duration
    failed = []
    while time.monotonic() < end:
        time.sleep(rng.uniform(0.5, 2.0))
        now = time.monotonic()
        for m in live():
            if m.frozen_until is not None and now >= m.frozen_until:
                m.signal(signal.SIGCONT)
                m.frozen_until = None
        alive = live()
        roll = rng.random()
        if roll < 0.35:
            if len(alive) > 2:
                rng.choice(alive).signal(signal.SIGKILL)
                counts["kill"] += 1
        elif roll < 0.50:
            awake = [m for m in alive if m.frozen_until is None]
            if awake:
                victim = rng.choice(awake)
                victim.signal(signal.SIGSTOP)
                victim.frozen_until = now + rng.uniform(0.2, 8.0)
                counts["freeze"] += 1
        elif len(alive) < args.max_members:
            start()
            counts["join"] += 1
    faults_end = time.monotonic()
    for m in live():
        if m.frozen_until is not None:
            m.signal(signal.SIGCONT)
            m.frozen_until = None
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


if __name__ == "__main__":
    sys.exit(main())
