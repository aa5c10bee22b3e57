"""The coordinator daemon for users who have only the wheel: ``wccl-coord`` (a console script of the
package) or ``python -m wccl.coord``, with the flags of the C daemon that ``meson install`` installs
(tools/wccl-coord.cc):

    wccl-coord --listen 0.0.0.0:48148 --tls-cert coord.pem --tls-key coord.key --tls-ca ca.pem --min-peers 2

Every ``--KEY VALUE`` is a configuration key (``--min-peers`` is ``min_peers``; ``wccl.config_keys()``
lists them), each also read from ``WCCL_<KEY>`` in the environment. It prints the port it listens on
and runs until SIGINT or SIGTERM.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Dict, List, Optional

from ._core import Coordinator
from ._lib import WcclError

USAGE = """usage: wccl-coord [--KEY VALUE ...]
The wccl coordinator. Every configuration key is a flag, '-' for '_' (wccl.config_keys() lists
them), each also read from WCCL_<KEY> in the environment. The usual ones: --listen HOST:PORT
(default 0.0.0.0:48148, the wccl port; port 0 picks one), --tls on|off, --tls-cert FILE,
--tls-key FILE, --tls-ca FILE (docs/tls.md), --min-peers N, --peer-timeout-ms N, --log-level LEVEL,
--events-log FILE, --http HOST:PORT (/metrics, /status, /status.json; docs/operations.md).
"""


def parse(argv: List[str]) -> Dict[str, str]:
    """``--KEY VALUE`` pairs as configuration keys; SystemExit(2) naming a malformed argument."""
    config = {} if "WCCL_LISTEN" in os.environ else {"listen": "0.0.0.0:48148"}
    i = 0
    while i < len(argv):
        flag = argv[i]
        if not flag.startswith("--") or i + 1 >= len(argv):
            sys.stderr.write(f'wccl-coord: unexpected argument "{flag}"\n{USAGE}')
            raise SystemExit(2)
        config[flag[2:].replace("-", "_")] = argv[i + 1]
        i += 2
    return config


def main(argv: Optional[List[str]] = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if "--help" in args or "-h" in args:
        sys.stdout.write(USAGE)
        return 0
    config = parse(args)
    stop = threading.Event()
    caught: List[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        caught.append(signal.Signals(signum).name)
        stop.set()

    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, on_signal)
    try:
        coord = Coordinator(**config)
    except WcclError as e:
        sys.stderr.write(f"wccl-coord: {e}\n")
        return 2 if isinstance(e, ValueError) else 1
    with coord:
        print(f"wccl-coord listening on port {coord.port}", flush=True)
        if coord.http_port:
            print(f"wccl-coord serving http on port {coord.http_port}", flush=True)
        while not stop.wait(3600):
            pass
    sys.stderr.write(f"wccl-coord: stopped by {caught[0]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
