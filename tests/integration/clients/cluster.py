"""A loopback cluster for the client conformance tests, started as tests/support/src/cluster.cpp
does: one tessera-scheduler, one tessera-worker (--backend cpu), one tessera-kvstore and two
tessera-frontends on stories260K, every port chosen by the kernel (read from the processes'
LISTENING lines). Frontend 0 has the admin token ADMIN_TOKEN and the kvstore (admin operations)."""
from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import tempfile
import time
import urllib.request
from typing import Callable, Dict, List, Optional

ADMIN_TOKEN = "py-admin-secret"


def wait_until(pred: Callable[[], bool], timeout: float, step: float = 0.02) -> bool:
    """Polls `pred` until it is true or `timeout` seconds pass (the poll step is not a sync sleep)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return pred()


def field(line: str, name: str) -> str:
    for part in line.split():
        if part.startswith(name + "="):
            return part[len(name) + 1:]
    return ""


class Proc:
    def __init__(self, args: List[str], log: str) -> None:
        self.log = log
        with open(log, "wb") as err:
            self.p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=err, text=True)

    def wait_line(self, prefix: str, timeout: float) -> str:
        assert self.p.stdout is not None
        sel = selectors.DefaultSelector()
        sel.register(self.p.stdout, selectors.EVENT_READ)
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if sel.select(end - time.monotonic()):
                line = self.p.stdout.readline()
                if not line:
                    return ""
                if line.startswith(prefix):
                    return line.strip()
        return ""

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        try:
            self.p.wait(5)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        if self.p.stdout is not None:
            self.p.stdout.close()


class Cluster:
    def __init__(self, bin_dir: str, shared: str, worker_args: Optional[List[str]] = None, frontends: int = 2) -> None:
        self.dir = tempfile.mkdtemp(prefix="tessera-pyclient-")
        model = os.path.join(shared, "models/stories260K/stories260K.bin")
        tok = os.path.join(shared, "models/stories260K/tok512.bin")
        self.procs: List[Proc] = []
        # CURVE keys for the internal sockets, as `tessera up` makes them (docs/security.md).
        self.keys = os.path.join(self.dir, "keys")
        subprocess.run([os.path.join(bin_dir, "tessera"), "keys", self.keys], check=True, stdout=subprocess.DEVNULL)
        s = self._start([os.path.join(bin_dir, "tessera-scheduler"), "--frontend-endpoint", "tcp://127.0.0.1:*",
                         "--worker-endpoint", "tcp://127.0.0.1:*", "--metrics-port", "0", "--heartbeat-ms", "100"],
                        "scheduler")
        k = self._start([os.path.join(bin_dir, "tessera-kvstore"), "--listen", "tcp://127.0.0.1:*"], "kvstore")
        line = s.wait_line("LISTENING", 10)
        if not line:
            raise RuntimeError("tessera-scheduler did not start\n" + self.logs())
        sched_fe, sched_we = field(line, "frontends"), field(line, "workers")
        self.metrics_port = int(field(line, "metrics"))
        self._start([os.path.join(bin_dir, "tessera-worker"), "--model", model, "--scheduler", sched_we,
                     "--threads", "1", "--num-pages", "512", "--name", "w0", "--backend", "cpu"] + (worker_args or []),
                    "worker")
        kl = k.wait_line("tessera-kvstore listening on", 10)
        if not kl:
            raise RuntimeError("tessera-kvstore did not start\n" + self.logs())
        self.kvstore = next(p for p in kl.split() if p.startswith("tcp://"))
        self.frontends: List[Proc] = []
        self.zmq: List[str] = []
        self.http: List[int] = []
        for i in range(frontends):
            f = self._start([os.path.join(bin_dir, "tessera-frontend"), "--http-port", "0", "--zmq-endpoint",
                             "tcp://127.0.0.1:*", "--schedulers", sched_fe, "--model", model, "--tokenizer", tok,
                             "--heartbeat-ms", "100"]
                            + (["--admin-token", ADMIN_TOKEN, "--kvstore", self.kvstore] if i == 0 else []),
                            f"frontend{i}")
            fl = f.wait_line("LISTENING", 15)
            if not fl:
                raise RuntimeError("tessera-frontend did not start\n" + self.logs())
            self.frontends.append(f)
            self.zmq.append(field(fl, "zmq"))
            self.http.append(int(field(fl, "http")))
        if not wait_until(lambda: all(self._ready(p) for p in self.http), 15, 0.05):
            raise RuntimeError("/ready did not turn 200 within 15 s\n" + self.logs())

    def _start(self, args: List[str], name: str) -> Proc:
        p = Proc(args + ["--curve-dir", self.keys], os.path.join(self.dir, name + ".log"))
        self.procs.append(p)
        return p

    def _ready(self, port: int) -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/ready", timeout=2) as r:
                return r.status == 200
        except Exception:  # noqa: BLE001
            return False

    def post(self, port: int, path: str, body: Dict) -> Dict:
        req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=30) as r:
            return json.loads(r.read())

    def metric(self, name: str, label: str = "") -> Optional[float]:
        """Sum of the scheduler's samples of `name` whose labels contain `label`."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            text = r.read().decode()
        total, seen = 0.0, False
        for line in text.splitlines():
            if line.startswith(name) and (line[len(name)] in "{ ") and label in line:
                total += float(line.rsplit(" ", 1)[1])
                seen = True
        return total if seen else None

    def logs(self) -> str:
        out = ""
        for p in self.procs:
            try:
                with open(p.log, "rb") as f:
                    out += f"---- {os.path.basename(p.log)} (tail)\n" + f.read()[-3000:].decode(errors="replace")
            except OSError:
                pass
        return out

    def stop(self) -> None:
        for p in reversed(self.procs):
            p.kill(signal.SIGTERM)
