#!/usr/bin/env python3
"""Scale-out by simulation (docs/simulation.md, docs/BENCHMARKS.md "Scale-out").

Starts N frontends, M schedulers and K sim workers (`tessera-worker --backend sim`) on this
machine as real processes over CURVE (keys from `tessera keys`), drives a shared-prefix workload
(G system prompts + a per-user question each) through the frontends' ZeroMQ client API, checks
every answer against the sim backend's deterministic tokens, and reports:

  throughput  output tokens per *simulated* second over K = 1, 2, 4, ... workers and the scaling
              efficiency thr(K) / (K * thr(1)); per run also the prefix hit rate (cached / prompt
              tokens from the answers' usage), max/mean routed requests over workers and over
              schedulers, CPU per step of the scheduler(s) and of the workers
  schedulers  the same workload with M schedulers vs one: hit rate and load over schedulers
  leave       routing keys moved and requests lost when 1/8 of the workers leave (drain: SIGTERM,
              or crash: SIGKILL) or one scheduler leaves (SIGTERM), mid-run

Simulated time: every sim worker sleeps simulated_step_time / time_scale, and the simulated
throughput is tokens / (real window * time_scale); the window ends when the last request is sent
(steady state, no tail). The time scale is the same at every K (default 0.1: a step runs 10x
slower than on the simulated GPU), so each step carries the same real control-plane overhead;
choose it so that the largest K does not saturate the machine's CPU (--divide-scale instead uses
time_scale / K, which keeps the real request rate constant but shrinks the relative overhead as K
grows, flattering large K). Workers are assigned to schedulers round-robin: each lists every
scheduler, its own first (`--scheduler own,others... --scheduler-order listed`), so it registers
with its own and moves to the next when that one leaves; frontends list every scheduler.

Needs python3 with pyzmq and msgpack (Debian python3-zmq python3-msgpack). Example:
  python3 bench/scale/scale_bench.py --bin build/bin --shared ../shared throughput --workers 1,4,16,64
  python3 bench/scale/scale_bench.py schedulers --workers 16 --schedulers 4 --frontends 4
  python3 bench/scale/scale_bench.py leave --workers 16 --schedulers 2
"""
import argparse
import json
import os
import random
import re
import select
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request

import msgpack
import zmq

M64 = (1 << 64) - 1


# --- the sim backend's deterministic model (worker/src/backends/sim/sim_backend.cpp) ---------
def mix64(x):
    x &= M64
    x ^= x >> 30
    x = (x * 0xBF58476D1CE4E5B9) & M64
    x ^= x >> 27
    x = (x * 0x94D049BB133111EB) & M64
    x ^= x >> 31
    return x


SEED = 0x5EED0F7E55E7A000


def sim_chain(prev, token, pos):
    tp = ((token & 0xFFFFFFFF) << 32) | (pos & 0xFFFFFFFF)
    return mix64(prev ^ mix64(tp + 0x9E3779B97F4A7C15))


def sim_token(state, vocab, eos):
    skip = 3 <= eos < vocab
    t = 3 + mix64(state ^ 0x70C3E5) % (vocab - 3 - (1 if skip else 0))
    return t + 1 if skip and t >= eos else t


def sim_expected(prompt, n, vocab, eos):
    state, attended, pos = SEED, 0, 0
    for t in prompt:
        state = sim_chain(state, t, pos)
        attended = mix64(attended + state)
        pos += 1
    out = []
    for _ in range(n):
        t = sim_token(attended, vocab, eos)
        out.append(t)
        state = sim_chain(state, t, pos)
        attended = mix64(attended + state)
        pos += 1
    return out


# --- processes ----------------------------------------------------------------------------------
def read_line(proc, prefix, timeout_s=30.0):
    deadline = time.monotonic() + timeout_s
    buf = b""
    fd = proc.stdout.fileno()
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.2)
        if r:
            chunk = os.read(fd, 4096)
            if not chunk:
                break
            buf += chunk
            for line in buf.decode(errors="replace").splitlines():
                if line.startswith(prefix):
                    return line
    raise RuntimeError("%s: no %s line within %.0f s (exit %s)" % (proc.args[0], prefix, timeout_s, proc.poll()))


def field(line, key):
    m = re.search(r"\b%s=(\S+)" % key, line)
    return m.group(1) if m else ""


def proc_cpu_s(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            parts = f.read().rsplit(")", 1)[1].split()
        return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return 0.0


def scrape(port):
    """Prometheus text -> {(name, labels): value}."""
    out = {}
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        for line in r.read().decode().splitlines():
            if not line or line.startswith("#"):
                continue
            m = re.match(r"([a-zA-Z_:][\w:]*)(\{[^}]*\})?\s+(\S+)", line)
            if m:
                out[(m.group(1), m.group(2) or "")] = float(m.group(3))
    return out


def total(samples, name, label=""):
    return sum(v for (n, l), v in samples.items() if n == name and label in l)


class Cluster:
    def __init__(self, a, schedulers, workers, frontends, time_scale):
        self.a = a
        self.dir = tempfile.mkdtemp(prefix="tessera-scale-")
        self.keys = os.path.join(self.dir, "keys")
        subprocess.run([os.path.join(a.bin, "tessera"), "keys", self.keys], check=True, stdout=subprocess.DEVNULL)
        self.procs = []
        self.scheds = []  # dicts: proc, fe, we, metrics
        self.workers = []  # dicts: proc, name, sched
        self.frontends = []  # dicts: proc, zmq
        self.time_scale = time_scale
        try:
            for i in range(schedulers):
                self.start_scheduler(i)
            for i in range(workers):
                self.start_worker(i, i % schedulers)
            eps = ",".join(s["fe"] for s in self.scheds)
            for i in range(frontends):
                p = self.spawn("frontend%d" % i, [
                    "tessera-frontend", "--http-port", "0", "--zmq-endpoint", "tcp://127.0.0.1:*", "--schedulers", eps,
                    "--model", a.model, "--tokenizer", a.tokenizer, "--max-concurrent-requests", "100000",
                    "--max-queued-requests", "1000000", "--http-threads", "1",
                    "--scheduler-load-epsilon", repr(a.scheduler_load_epsilon)])
                line = read_line(p, "LISTENING")
                self.frontends.append({"proc": p, "zmq": field(line, "zmq"), "http": int(field(line, "http"))})
            self.wait_live(workers)
            self.wait_ready()
        except Exception:
            self.stop()
            raise

    def spawn(self, name, argv):
        log = open(os.path.join(self.dir, name + ".log"), "wb")
        argv = [os.path.join(self.a.bin, argv[0])] + argv[1:] + ["--curve-dir", self.keys, "--log-level", "warn"]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=log)
        self.procs.append(p)
        return p

    def start_scheduler(self, i):
        p = self.spawn("scheduler%d" % i, [
            "tessera-scheduler", "--name", "s%d" % i, "--frontend-endpoint", "tcp://127.0.0.1:*", "--worker-endpoint",
            "tcp://127.0.0.1:*", "--metrics-port", "0", "--heartbeat-ms", "250", "--max-running", str(self.a.max_running),
            "--route-load-epsilon", repr(self.a.route_load_epsilon)])
        line = read_line(p, "LISTENING")
        self.scheds.append({"proc": p, "fe": field(line, "frontends"), "we": field(line, "workers"),
                            "metrics": int(field(line, "metrics")), "name": "s%d" % i})

    def start_worker(self, i, s):
        name = "w%d" % i
        order = [self.scheds[s]["we"]] + [x["we"] for j, x in enumerate(self.scheds) if j != s]
        p = self.spawn(name, [
            "tessera-worker", "--backend", "sim", "--model", self.a.model, "--scheduler", ",".join(order),
            "--scheduler-order", "listed", "--name", name, "--num-pages", str(self.a.num_pages), "--metrics-port", "-1", "--sim-profile",
            self.a.sim_profile, "--sim-time-scale", repr(self.time_scale)] + (
                ["--sim-cost", self.a.sim_cost] if self.a.sim_cost else []))
        read_line(p, "READY")
        self.workers.append({"proc": p, "name": name, "sched": s})

    def live_scheds(self):
        return [s for s in self.scheds if s["proc"].poll() is None]

    def wait_live(self, n, timeout_s=60.0, poll_s=0.1):
        deadline = time.monotonic() + timeout_s
        live = -1
        while time.monotonic() < deadline:
            live = sum(total(scrape(s["metrics"]), "tessera_scheduler_live_workers") for s in self.live_scheds())
            if live == n:
                return
            time.sleep(poll_s)  # polling a metric with a deadline, not standing in for synchronization
        raise RuntimeError("%d of %d workers registered within %.0f s (logs in %s)" % (live, n, timeout_s, self.dir))

    def wait_ready(self, timeout_s=30.0):
        """Every frontend's /ready answers 200 (it has heard a scheduler with a live worker)."""
        deadline = time.monotonic() + timeout_s
        for f in self.frontends:
            while True:
                try:
                    with urllib.request.urlopen("http://127.0.0.1:%d/ready" % f["http"], timeout=5) as r:
                        if r.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError("a frontend was not ready within %.0f s (logs in %s)" % (timeout_s, self.dir))
                time.sleep(0.05)

    def scrape_all(self):
        return {s["name"]: scrape(s["metrics"]) for s in self.live_scheds()}

    def cpu(self):
        return {"scheduler": sum(proc_cpu_s(s["proc"].pid) for s in self.scheds),
                "worker": sum(proc_cpu_s(w["proc"].pid) for w in self.workers),
                "frontend": sum(proc_cpu_s(f["proc"].pid) for f in self.frontends)}

    def stop(self):
        for p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGKILL)
        for p in self.procs:
            p.wait()
        if not self.a.keep:
            shutil.rmtree(self.dir, ignore_errors=True)


# --- workload -------------------------------------------------------------------------------
class Workload:
    def __init__(self, a, seed):
        rng = random.Random(seed)
        self.a = a
        self.systems = [[rng.randrange(3, a.vocab) for _ in range(a.system_tokens)] for _ in range(a.groups)]
        self.rng = rng

    def request(self, i):
        g = i % self.a.groups
        q = [self.rng.randrange(3, self.a.vocab) for _ in range(self.a.question_tokens)]
        return self.systems[g] + q


class Driver:
    """Closed loop over the frontends' client APIs: `concurrency` requests in flight."""

    def __init__(self, cluster, a):
        self.ctx = zmq.Context()
        self.socks = []
        for f in cluster.frontends:
            s = self.ctx.socket(zmq.DEALER)
            s.setsockopt(zmq.LINGER, 0)
            s.setsockopt(zmq.RCVHWM, 0)
            s.setsockopt(zmq.SNDHWM, 0)
            s.connect(f["zmq"])
            self.socks.append(s)
        self.a = a
        self.next_id = 1

    def close(self):
        for s in self.socks:
            s.close()
        self.ctx.term()

    def run(self, prompts, concurrency, timeout_s=600.0, routing_keys=None, on_progress=None):
        """Sends every prompt, at most `concurrency` at once. Returns per-request records."""
        a = self.a
        poller = zmq.Poller()
        for s in self.socks:
            poller.register(s, zmq.POLLIN)
        pending = {}
        records = []
        nxt = 0
        t0 = time.monotonic()
        last_send = t0
        deadline = t0 + timeout_s
        while (nxt < len(prompts) or pending) and time.monotonic() < deadline:
            while nxt < len(prompts) and len(pending) < concurrency:
                rid = self.next_id
                self.next_id += 1
                msg = {"v": 1, "type": "completion", "id": rid, "prompt_tokens": prompts[nxt], "max_tokens": a.max_tokens,
                       "temperature": 0.0, "ignore_eos": True, "stream": False}
                if routing_keys is not None:
                    msg["routing_key"] = routing_keys[nxt]
                sock = self.socks[nxt % len(self.socks)]
                sock.send(msgpack.packb(msg))
                pending[rid] = (nxt, time.monotonic())
                nxt += 1
                last_send = time.monotonic()
            for sock, _ in poller.poll(200):
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    m = msgpack.unpackb(frames[-1], raw=False, strict_map_key=False)
                    if m.get("type") not in ("final", "error") or m.get("id") not in pending:
                        continue
                    idx, ts = pending.pop(m["id"])
                    rec = {"i": idx, "t_send": ts - t0, "t_end": time.monotonic() - t0, "type": m["type"]}
                    if m["type"] == "final":
                        rec["tokens"] = m.get("tokens", [])
                        rec["usage"] = m.get("usage", {})
                    else:
                        rec["error"] = "%s %s" % (m.get("code"), m.get("message"))
                    records.append(rec)
                    if on_progress:
                        on_progress(len(records))
        for rid, (idx, ts) in pending.items():
            records.append({"i": idx, "t_send": ts - t0, "t_end": None, "type": "lost", "error": "no answer"})
        return records, last_send - t0


def check(records, prompts, a):
    wrong = 0
    for r in records:
        if r["type"] == "final" and r["tokens"] != sim_expected(prompts[r["i"]], a.max_tokens, a.vocab, a.eos):
            wrong += 1
    return wrong


def routed(samples):
    """{worker: routed requests} from every scheduler's scrape."""
    out = {}
    for s in samples.values():
        for (n, l), v in s.items():
            if n == "tessera_scheduler_routed_requests_total":
                w = field(l.replace(",", " ").replace("{", " ").replace("}", " ").replace('"', ""), "worker")
                out[w] = out.get(w, 0) + v
    return out


def delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items()}


def max_mean(vals):
    vals = list(vals)
    m = sum(vals) / len(vals) if vals else 0
    return max(vals) / m if m > 0 else float("nan")


def measure(a, schedulers, workers, frontends, time_scale, requests, concurrency, seed):
    """One run: start, warm up, drive, stop. Returns a dict of figures."""
    cl = Cluster(a, schedulers, workers, frontends, time_scale)
    try:
        wl = Workload(a, seed)
        dr = Driver(cl, a)
        warm = [wl.systems[g] + [3 + g] for g in range(a.groups)]
        dr.run(warm, len(warm))
        prompts = [wl.request(i) for i in range(requests)]
        s0, c0 = cl.scrape_all(), cl.cpu()
        recs, window = dr.run(prompts, concurrency)
        s1, c1 = cl.scrape_all(), cl.cpu()
        dr.close()
    finally:
        cl.stop()
    finals = [r for r in recs if r["type"] == "final"]
    in_window = [r for r in finals if r["t_end"] <= window]
    tokens = sum(len(r["tokens"]) for r in in_window)
    steps = sum(total(s1[n], "tessera_scheduler_step_seconds_count") - total(s0.get(n, {}), "tessera_scheduler_step_seconds_count")
                for n in s1)
    per_worker = delta(routed(s1), routed(s0))
    per_sched = {n: total(s1[n], "tessera_scheduler_routed_requests_total") -
                 total(s0.get(n, {}), "tessera_scheduler_routed_requests_total") for n in s1}
    prompt_tok = sum(r["usage"].get("prompt_tokens", 0) for r in finals)
    cached_tok = sum(r["usage"].get("cached_tokens", 0) for r in finals)
    return {
        "schedulers": schedulers, "workers": workers, "frontends": frontends, "time_scale": time_scale,
        "requests": requests, "concurrency": concurrency, "answered": len(finals),
        "errors": sum(1 for r in recs if r["type"] == "error"), "lost": sum(1 for r in recs if r["type"] == "lost"),
        "wrong": check(recs, prompts, a), "window_s": window,
        "sim_tokens_per_s": tokens / (window * time_scale) if window > 0 else 0.0,
        "hit_rate": cached_tok / prompt_tok if prompt_tok else 0.0,
        "system_share": a.system_tokens / (a.system_tokens + a.question_tokens),
        "worker_max_mean": max_mean(per_worker.get("w%d" % i, 0) for i in range(workers)),
        "sched_max_mean": max_mean(per_sched.values()),
        "steps": steps,
        "sched_cpu_us_per_step": (c1["scheduler"] - c0["scheduler"]) / steps * 1e6 if steps else float("nan"),
        "worker_cpu_us_per_step": (c1["worker"] - c0["worker"]) / steps * 1e6 if steps else float("nan"),
        "frontend_cpu_us_per_request": (c1["frontend"] - c0["frontend"]) / max(1, len(finals)) * 1e6,
    }


def median_runs(runs):
    keys = [k for k in runs[0] if isinstance(runs[0][k], (int, float))]
    out = {k: statistics.median(r[k] for r in runs) for k in keys}
    out["runs"] = runs
    return out


def cmd_throughput(a):
    results = []
    base = None
    for k in [int(x) for x in a.workers.split(",")]:
        scale = a.time_scale / k if a.divide_scale else a.time_scale
        runs = []
        for rep in range(a.repeat):
            runs.append(measure(a, a.schedulers, k, a.frontends, scale, max(a.min_requests, k * a.per_worker * a.rounds),
                                k * a.per_worker, a.seed + rep))
            r = runs[-1]
            print("  K=%d rep %d: %.0f sim tok/s, hit %.3f, worker max/mean %.2f, sched CPU %.0f us/step, worker CPU "
                  "%.0f us/step, wrong %d, errors %d, lost %d" % (
                      k, rep, r["sim_tokens_per_s"], r["hit_rate"], r["worker_max_mean"], r["sched_cpu_us_per_step"],
                      r["worker_cpu_us_per_step"], r["wrong"], r["errors"], r["lost"]), file=sys.stderr)
        m = median_runs(runs)
        if base is None:
            base = m["sim_tokens_per_s"] / k
        m["efficiency"] = m["sim_tokens_per_s"] / (k * base)
        results.append(m)
    print("%-4s %-8s %14s %10s %8s %12s %12s %16s %16s %6s %6s" % (
        "K", "scale", "sim tok/s", "efficiency", "hit", "wrk max/mean", "sch max/mean", "sched us/step",
        "worker us/step", "wrong", "lost"))
    for m in results:
        print("%-4d %-8.4g %14.0f %10.3f %8.3f %12.2f %12.2f %16.0f %16.0f %6d %6d" % (
            m["workers"], m["time_scale"], m["sim_tokens_per_s"], m["efficiency"], m["hit_rate"],
            m["worker_max_mean"], m["sched_max_mean"], m["sched_cpu_us_per_step"], m["worker_cpu_us_per_step"],
            m["wrong"], m["lost"] + m["errors"]))
    return results


def cmd_schedulers(a):
    results = []
    for m_s in sorted({1, a.schedulers}):
        runs = [measure(a, m_s, a.workers_n, a.frontends, a.time_scale, a.min_requests, a.workers_n * a.per_worker,
                        a.seed + rep) for rep in range(a.repeat)]
        results.append(median_runs(runs))
    print("%-3s %-3s %-3s %8s %14s %12s %12s %6s %6s" % ("M", "K", "N", "hit", "sim tok/s", "wrk max/mean",
                                                       "sch max/mean", "wrong", "lost"))
    for m in results:
        print("%-3d %-3d %-3d %8.3f %14.0f %12.2f %12.2f %6d %6d" % (
            m["schedulers"], m["workers"], m["frontends"], m["hit_rate"], m["sim_tokens_per_s"],
            m["worker_max_mean"], m["sched_max_mean"], m["wrong"], m["lost"] + m["errors"]))
    if len(results) == 2 and results[0]["hit_rate"] > 0:
        print("hit rate with %d schedulers / with one: %.3f" % (a.schedulers, results[1]["hit_rate"] / results[0]["hit_rate"]))
    return results


def probe_owners(cl, dr, keys, by):
    """Which worker (by='worker') or scheduler (by='scheduler') each routing key lands on: one
    fresh prompt per key, one at a time, the routed counters' change says where it went."""
    rng = random.Random(99)
    owners = []
    for k in keys:
        before = cl.scrape_all()
        recs, _ = dr.run([[rng.randrange(3, cl.a.vocab) for _ in range(8)]], 1, routing_keys=[k])
        after = cl.scrape_all()
        if by == "worker":
            d = delta(routed(after), routed(before))
        else:
            d = {n: total(after[n], "tessera_scheduler_routed_requests_total") -
                 total(before.get(n, {}), "tessera_scheduler_routed_requests_total") for n in after}
        hit = [n for n, v in d.items() if v > 0]
        owners.append(hit[0] if len(hit) == 1 and recs[0]["type"] == "final" else None)
    return owners


def cmd_leave(a):
    out = {}
    keys = ["probe-%d" % i for i in range(a.probes)]
    for case in ["workers-drain", "workers-crash", "scheduler"]:
        cl = Cluster(a, a.schedulers, a.workers_n, a.frontends, a.time_scale)
        try:
            dr = Driver(cl, a)
            by = "scheduler" if case == "scheduler" else "worker"
            before = probe_owners(cl, dr, keys, by)
            wl = Workload(a, a.seed)
            prompts = [wl.request(i) for i in range(a.min_requests)]
            if case == "scheduler":
                victims = [cl.scheds[-1]["proc"]]
                sig = signal.SIGTERM
                gone = {cl.scheds[-1]["name"]}
            else:
                n = max(1, a.workers_n // 8)
                victims = [w["proc"] for w in cl.workers[-n:]]
                sig = signal.SIGTERM if case == "workers-drain" else signal.SIGKILL
                gone = {w["name"] for w in cl.workers[-n:]}
            fired = []
            live_again = []  # seconds from the victims' exit to every remaining worker registered

            def watch():
                for p in victims:
                    p.wait()
                gone_at = time.monotonic()
                # A leaving scheduler's workers register with the next scheduler of their list;
                # leaving workers are simply gone.
                cl.wait_live(a.workers_n if case == "scheduler" else a.workers_n - len(victims), poll_s=0.01)
                live_again.append(time.monotonic() - gone_at)
            watcher = threading.Thread(target=watch)

            def progress(done):
                if not fired and done >= len(prompts) // 3:
                    fired.append(True)
                    for p in victims:
                        p.send_signal(sig)
                    watcher.start()
            recs, _ = dr.run(prompts, a.workers_n * a.per_worker, on_progress=progress)
            watcher.join()
            rehome_s = live_again[0] if live_again else float("nan")
            after = probe_owners(cl, dr, keys, by)
            dr.close()
        finally:
            cl.stop()
        stayed = [(b, c) for b, c in zip(before, after) if b is not None and c is not None]
        moved = sum(1 for b, c in stayed if b != c)
        moved_from_live = sum(1 for b, c in stayed if b != c and b not in gone)
        out[case] = {"probes": len(stayed), "moved": moved, "moved_fraction": moved / max(1, len(stayed)),
                     "moved_from_survivors": moved_from_live, "requests": len(prompts),
                     "errors": sum(1 for r in recs if r["type"] == "error"),
                     "lost": sum(1 for r in recs if r["type"] == "lost"), "wrong": check(recs, prompts, a),
                     "error_kinds": sorted({r["error"] for r in recs if r["type"] == "error"})[:3],
                     "members": a.schedulers if case == "scheduler" else a.workers_n, "left": len(gone),
                     "live_again_s": rehome_s}
        print("%-14s keys moved %d/%d (%.3f; ideal %.3f; from survivors %d), requests %d: errors %d, lost %d, wrong %d %s;"
              " workers live again %.2f s after the exit" % (
                  case, moved, len(stayed), out[case]["moved_fraction"], out[case]["left"] / out[case]["members"],
                  moved_from_live, len(prompts), out[case]["errors"], out[case]["lost"], out[case]["wrong"],
                  out[case]["error_kinds"], rehome_s))
    return out


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.dirname(os.path.dirname(here))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--bin", default=os.path.join(root, "build", "bin"))
    p.add_argument("--shared", default=os.environ.get("TESSERA_SHARED_DIR", os.path.join(root, "..", "shared")))
    p.add_argument("--frontends", type=int, default=1)
    p.add_argument("--schedulers", type=int, default=1)
    p.add_argument("--sim-profile", default="h100-llama2-7b")
    p.add_argument("--sim-cost", default="")
    p.add_argument("--time-scale", type=float, default=0.1, help="simulated seconds per real second")
    p.add_argument("--divide-scale", action="store_true",
                   help="throughput: time scale / K, so the real request rate stays the same at every K")
    p.add_argument("--groups", type=int, default=8, help="system prompts")
    p.add_argument("--system-tokens", type=int, default=96)
    p.add_argument("--question-tokens", type=int, default=24)
    p.add_argument("--max-tokens", type=int, default=16)
    p.add_argument("--per-worker", type=int, default=8, help="requests in flight per worker")
    p.add_argument("--rounds", type=int, default=6, help="throughput: requests = K * per-worker * rounds")
    p.add_argument("--min-requests", type=int, default=384)
    p.add_argument("--max-running", type=int, default=64)
    p.add_argument("--num-pages", type=int, default=2048)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--probes", type=int, default=200)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--scheduler-load-epsilon", type=float, default=0.25,
                   help="frontends' load bound over schedulers (tessera-frontend --scheduler-load-epsilon)")
    p.add_argument("--route-load-epsilon", type=float, default=0.25,
                   help="schedulers' load bound over their workers (tessera-scheduler --route-load-epsilon)")
    p.add_argument("--keep", action="store_true", help="keep the logs' directory")
    p.add_argument("--json", default="", help="write the results here")
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("throughput")
    t.add_argument("--workers", default="1,2,4,8,16,32,64")
    s = sub.add_parser("schedulers")
    s.add_argument("--workers", dest="workers_n", type=int, default=16)
    lv = sub.add_parser("leave")
    lv.add_argument("--workers", dest="workers_n", type=int, default=16)
    a = p.parse_args()
    a.model = os.path.join(a.shared, "models/stories260K/stories260K.bin")
    a.tokenizer = os.path.join(a.shared, "models/stories260K/tok512.bin")
    a.vocab, a.eos = 512, 2
    res = {"throughput": cmd_throughput, "schedulers": cmd_schedulers, "leave": cmd_leave}[a.cmd](a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"args": vars(a), "results": res}, f, indent=1, default=str)


if __name__ == "__main__":
    main()
