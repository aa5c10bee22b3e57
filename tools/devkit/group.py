"""A group of wccl processes on this machine, for the churn soak (tests/churn_soak.py) and the
recovery-time benchmark (bench/recovery_time.py): a job's certificates (the openssl CLI, as
docs/tls.md does), the wccl-coord daemon, and members (tests/churn_member.c) whose output lines are
read as they come, with the time each arrived."""

import subprocess
import threading
import time


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
    """One churn-member process; commits holds (arrival time, step, epoch, size) per committed step."""

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
        self.history = []
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
                self.history.append(self.last_commit)
                del self.history[:-1000]
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


def start_coordinator(cmd, env, log_path, port=0, host="127.0.0.1"):
    """The coordinator daemon on host:port (port 0: any); returns (process, port). cmd: the wccl-coord
    program, or a command line (a list) such as [python, "-m", "wccl.coord", flags...], which may
    begin with a prefix that runs it elsewhere (Wan.command: in an emulated host's namespace)."""
    env = dict(env, WCCL_LISTEN=f"{host}:{port}")
    proc = subprocess.Popen([cmd] if isinstance(cmd, str) else list(cmd), env=env, stdout=subprocess.PIPE, stderr=open(log_path, "a"), text=True)
    for line in proc.stdout:
        if "listening on port" in line:
            return proc, int(line.split()[-1])
    raise RuntimeError(f"wccl-coord did not start; see {log_path}")


class Group:
    """The members started so far (live or not), each a churn-member process with COUNT elements."""

    def __init__(self, member_cmd, count, env, logdir):
        self.members = []
        self._cmd, self._count, self._env, self._logdir = member_cmd, count, env, logdir

    def start(self):
        name = f"p{len(self.members)}"
        m = Member(name, [self._cmd, str(self._count)], dict(self._env, WCCL_NAME=name), self._logdir)
        self.members.append(m)
        return m

    def live(self):
        return [m for m in self.members if m.alive()]
