"""``wccl-perf``, the all-reduce benchmark (docs/perf.md), as the wheel's console script: it runs the
program that ``pip install`` put beside libwccl, with the same arguments (``wccl-perf --help``)."""

from __future__ import annotations

import os
import sys

from ._lib import LIBRARY_PATH


def main() -> None:
    program = os.path.join(os.path.dirname(LIBRARY_PATH), "wccl-perf")
    if not os.access(program, os.X_OK):
        sys.exit(f"wccl-perf: {program} is not there: only a wheel (pip install .) carries it beside the library; "
                 "a build tree has it in build/bench/perf/, `meson install` in the prefix's bin/")
    os.execv(program, [program, *sys.argv[1:]])


if __name__ == "__main__":
    main()
