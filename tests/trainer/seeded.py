"""What the trainer's seeded simulations share (node_sim.py): a discrete-event loop
whose every draw comes from one seed, the violation a broken rule raises, the loop over seeds, and
the command line."""

from __future__ import annotations

import argparse
import heapq
import random
import subprocess
import sys
import types
from pathlib import Path
from typing import Callable, Dict, List, Optional, Tuple


class Violation(AssertionError):
    """A rule broken (the message names the seed, the time and what)."""


class EventLoop:
    """Events at simulated milliseconds, run in time order (ties in the order they were set)."""

    def __init__(self, seed: int, verbose: bool = False) -> None:
        self.seed, self.verbose = seed, verbose
        self.rng = random.Random(seed)
        self.now = 0
        self.queue: List[Tuple[int, int, Callable[[], None]]] = []
        self.seq = 0

    def at(self, t: int, fn: Callable[[], None]) -> None:
        self.seq += 1
        heapq.heappush(self.queue, (t, self.seq, fn))

    def log(self, text: str) -> None:
        if self.verbose:
            print(f"{self.now:7d} {text}")

    def fail(self, text: str) -> None:
        raise Violation(f"seed {self.seed} at {self.now} ms: {text}")

    def run_events(self, limit: int) -> None:
        """Runs every event; one later than ``limit`` ms means the job did not finish."""
        while self.queue:
            t, _, fn = heapq.heappop(self.queue)
            self.now = t
            if t > limit:
                self.fail("the job did not finish: " + self.describe())
            fn()

    def describe(self) -> str:
        return ""


def failures(run: Callable[[int], object], seeds) -> List[str]:
    """The violations of ``run(seed)`` over ``seeds``, one line each."""
    out = []
    for seed in seeds:
        try:
            run(seed)
        except Violation as e:
            out.append(str(e))
    return out


def main(doc: str, run: Callable[[int, bool, argparse.Namespace], object], argv: Optional[List[str]] = None,
         options: Callable[[argparse.ArgumentParser], None] = lambda p: None) -> int:
    """The command line of a simulation: --seeds/--first, or --seed with --verbose; a line per
    failing seed, then how many kept every rule. ``run(seed, verbose, args)`` runs one seed."""
    p = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=200, help="run seeds FIRST..FIRST+SEEDS-1")
    p.add_argument("--first", type=int, default=1)
    p.add_argument("--seed", type=int, help="run this seed alone")
    p.add_argument("--verbose", action="store_true", help="print every event")
    options(p)
    args = p.parse_args(argv)
    seeds = [args.seed] if args.seed is not None else range(args.first, args.first + args.seeds)
    failed = failures(lambda seed: run(seed, args.verbose, args), seeds)
    for line in failed:
        print(line)
    print(f"{len(seeds) - len(failed)} of {len(seeds)} seeds kept every rule")
    return 1 if failed else 0


def with_edits(monkeypatch, sim, attr: str, edits) -> None:
    """For the rest of a test, simulation module ``sim`` runs on its rule module (``sim.<attr>``)
    with each (text, replacement) applied to that module's source: a rule taken away, to show that
    the simulation then finds what the rule is for. ``monkeypatch`` is pytest's."""
    rules = getattr(sim, attr)
    source = Path(rules.__file__).read_text()
    for old, new in edits:
        assert source.count(old) == 1, f"{Path(rules.__file__).name} no longer holds: {old}"
        source = source.replace(old, new)
    module = types.ModuleType(f"{rules.__name__}_edited")
    module.__file__ = rules.__file__
    monkeypatch.setitem(sys.modules, module.__name__, module)  # dataclasses look their module up
    exec(compile(source, rules.__file__, "exec"), module.__dict__)
    monkeypatch.setattr(sim, attr, module)


def documented_command_tail(script: Path, seeds: int) -> str:
    """The last line `python3 SCRIPT --seeds SEEDS` prints, as the docs show it (fails the caller's
    test if the command does)."""
    r = subprocess.run([sys.executable, str(script), "--seeds", str(seeds)], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return r.stdout.strip().splitlines()[-1]


def seeds_showing(make: Callable[[int], "EventLoop"], seeds, keys) -> Dict[str, int]:
    """For each key, how many of the runs of ``seeds`` logged a line holding it."""
    seen = {key: 0 for key in keys}
    for seed in seeds:
        lines: List[str] = []
        sim = make(seed)
        sim.verbose, sim.log = True, lines.append
        sim.run()
        for key in seen:
            seen[key] += any(key in line for line in lines)
    return seen
