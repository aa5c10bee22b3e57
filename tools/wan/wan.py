#!/usr/bin/env python3
"""The WAN emulator: hosts in network namespaces joined by a user-space forwarder (docs/wan.md).

  wan.py up TOPOLOGY [--forwarder PATH] [--sysctl KEY=VALUE ...]
                                           create the hosts (each with those kernel settings,
                                           e.g. net.ipv4.tcp_slow_start_after_idle=0) and start
                                           the forwarder
  wan.py exec HOST -- COMMAND...           run a command on a host (ip netns exec)
  wan.py down                              stop the forwarder (its counters go to its log), remove the hosts

Each host of the topology file (format: tools/wan/forward.cc) becomes the network namespace
wccl-HOST with one device, address 10.77.0.(k+1)/16, through which every packet to another host
crosses the forwarder's emulated uplink, path and downlink. Needs root, `ip` (iproute2) and
/dev/net/tun. From Python: `with Wan(topology) as wan: wan.popen("h0", [...])`.

Standard library only.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
STATE = Path(os.environ.get("WCCL_WAN_STATE", "/run/wccl-wan/state.json"))


def default_forwarder():
    for build in ("build", "build-rel", "build-ci"):
        p = HERE.parents[1] / build / "tools" / "wccl-wan-forward"
        if p.exists():
            return str(p)
    return "wccl-wan-forward"


def sh(*args, netns=None, check=True):
    """Runs a set-up command (in a namespace), bounded."""
    cmd = (["ip", "netns", "exec", netns] if netns else []) + list(args)
    return subprocess.run(cmd, check=check, capture_output=True, text=True, timeout=30)


class Wan:
    """A running emulation. Hosts: name -> (address, namespace)."""

    def __init__(self, topology, forwarder=None, log=None, sysctls=(), outlive_owner=False):
        """outlive_owner: keep the forwarder running after this process (its thread that called
        up()) ends, as `wan.py up` does; otherwise it ends with it, even if killed."""
        self.topology = str(topology)
        self.outlive_owner = outlive_owner
        self.sysctls = list(sysctls)  # "key=value", set in every host's namespace
        self.forwarder = forwarder or default_forwarder()
        self.log = Path(log) if log else Path("/run/wccl-wan/forwarder.log")
        self.hosts = {}
        self.names = []  # the topology's hosts, in order, kept after down() for counters()
        self.devices = {}  # host: its device
        self.device_drops = {}  # host: packets its device dropped before the forwarder read them
        self.proc = None

    # -- life cycle ------------------------------------------------------------------------------
    def up(self):
        self.log.parent.mkdir(parents=True, exist_ok=True)
        err = open(self.log, "w")
        owner = [] if self.outlive_owner else ["--parent", str(os.getpid())]
        self.proc = subprocess.Popen([self.forwarder, *owner, self.topology], stdout=subprocess.PIPE, stderr=err,
                                     text=True, start_new_session=True)
        devices = []
        try:
            for line in self.proc.stdout:  # "host NAME ADDRESS DEVICE MTU" lines, then "ready"
                words = line.split()
                if words == ["ready"]:
                    break
                if len(words) == 5 and words[0] == "host":
                    devices.append(words[1:])
            else:
                raise RuntimeError(f"the forwarder stopped: {self.log.read_text().strip()}")
            self.names = [d[0] for d in devices]
            for name, address, device, mtu in devices:
                ns = "wccl-" + name
                sh("ip", "netns", "del", ns, check=False)
                sh("ip", "netns", "add", ns)
                self.hosts[name] = (address, ns)
                self.devices[name] = device
                sh("ip", "link", "set", device, "netns", ns)
                sh("ip", "link", "set", "lo", "up", netns=ns)
                sh("sysctl", "-qw", "net.ipv6.conf.all.disable_ipv6=1", netns=ns, check=False)
                for setting in self.sysctls:
                    sh("sysctl", "-qw", setting, netns=ns)
                sh("ip", "addr", "add", address + "/16", "dev", device, netns=ns)
                sh("ip", "link", "set", device, "mtu", mtu, "up", netns=ns)
        except BaseException:
            self.down()
            raise
        return self

    def down(self):
        """Stops the forwarder (it writes its counters to the log) and removes the namespaces."""
        for name, (_, ns) in self.hosts.items():  # while the devices exist: they go with the forwarder
            got = sh("cat", f"/sys/class/net/{self.devices[name]}/statistics/tx_dropped", netns=ns, check=False)
            if got.returncode == 0 and got.stdout.strip().isdigit():
                self.device_drops[name] = int(got.stdout)
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        for _, ns in self.hosts.values():
            sh("ip", "netns", "del", ns, check=False)
        self.hosts = {}

    def counters(self):
        """The forwarder's per-host counters, once it has stopped: {host: {column: int}}, with
        "dev-drop": what the host's device dropped before the forwarder read it (its transmit queue
        was full), which the topology does not have (forward.cc, kDeviceQueuePackets)."""
        lines = [l.split() for l in self.log.read_text().splitlines()]
        head = next((l for l in lines if l and l[0] == "host"), None)
        if head is None:
            return {}
        return {l[0]: dict(zip(head[1:], map(int, l[1:])), **{"dev-drop": self.device_drops.get(l[0], -1)})
                for l in lines if len(l) == len(head) and l[0] in self.names}

    def wire(self):
        """The bytes each host's uplink sent in every 100 ms, once the forwarder has stopped:
        {host: {"start": Unix time at which the first bin began, "bin_s": 0.1, "bytes": [...]}}."""
        return {l[1]: {"start": float(l[2]), "bin_s": float(l[3]), "bytes": [int(b) for b in l[4:]]}
                for l in (line.split() for line in self.log.read_text().splitlines())
                if len(l) >= 4 and l[0] == "wire" and l[1] in self.names}

    def __enter__(self):
        return self.up()

    def __exit__(self, *exc):
        self.down()

    # -- use -------------------------------------------------------------------------------------
    def address(self, host):
        return self.hosts[host][0]

    def command(self, host, cmd):
        return ["ip", "netns", "exec", self.hosts[host][1]] + list(cmd)

    def popen(self, host, cmd, **kw):
        return subprocess.Popen(self.command(host, cmd), **kw)

    def run(self, host, cmd, **kw):
        return subprocess.run(self.command(host, cmd), **kw)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="what", required=True)
    p_up = sub.add_parser("up")
    p_up.add_argument("topology")
    p_up.add_argument("--forwarder", default=None)
    p_up.add_argument("--sysctl", action="append", default=[], metavar="KEY=VALUE")
    p_exec = sub.add_parser("exec")
    p_exec.add_argument("host")
    p_exec.add_argument("command", nargs=argparse.REMAINDER)
    sub.add_parser("down")
    args = parser.parse_args()

    if args.what == "up":
        if STATE.exists():
            sys.exit(f"wan.py: an emulation is up ({STATE}); run `wan.py down` first")
        wan = Wan(args.topology, args.forwarder, sysctls=args.sysctl, outlive_owner=True).up()
        STATE.write_text(json.dumps({"pid": wan.proc.pid, "hosts": wan.hosts, "log": str(wan.log)}))
        for name, (address, ns) in wan.hosts.items():
            print(f"{name:12} {address:14} ip netns exec {ns} ...")
        return 0
    if not STATE.exists():
        sys.exit("wan.py: no emulation is up")
    state = json.loads(STATE.read_text())
    if args.what == "exec":
        command = args.command[1:] if args.command[:1] == ["--"] else args.command
        if args.host not in state["hosts"] or not command:
            sys.exit(f"wan.py: exec HOST -- COMMAND, HOST one of {', '.join(state['hosts'])}")
        os.execvp("ip", ["ip", "netns", "exec", state["hosts"][args.host][1]] + command)
    # down
    try:
        os.kill(state["pid"], signal.SIGTERM)
        for _ in range(100):
            os.kill(state["pid"], 0)
            time.sleep(0.1)
    except ProcessLookupError:
        pass
    for _, ns in state["hosts"].values():
        sh("ip", "netns", "del", ns, check=False)
    STATE.unlink()
    print(Path(state["log"]).read_text(), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
