#!/usr/bin/python3
"""Benchmark of the Python client (clients/python, tessera_client) against the raw protocol
(docs/BENCHMARKS.md "Python client"), the same method as bench/node_client/bench.mjs:
  1. per-request overhead: 300 sequential non-streamed completions of 1 token on a real cluster;
  2. 32 concurrent streams of stories260K (64 requests x 256 tokens) on a real cluster: wall
     time, token events/s and the process's CPU per event -- does the client keep up, with 32
     threads on one sync Client and with 32 asyncio tasks on one AsyncClient?
  3. the client's event-rate ceiling: 32 streams x 2000 events from a synthetic frontend
     (blaster.py) that sends pre-encoded events as fast as it can.
"raw" is a minimal pyzmq DEALER + msgpack loop on one thread: requests packed by hand, every
reply unpacked and counted by id. Each figure is the median of --runs runs (default 5), the
kinds alternating in rotated order. "CPU" is time.process_time() of the benchmark process (every
thread: the client's I/O thread and ZeroMQ's included; the cluster runs in other processes).

usage: bench.py [--runs N] [--bin build/bin] [--shared ../shared]   (Debian python3-zmq/-msgpack)
"""
import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import threading
import time
from typing import Any, Callable, Dict, List, Tuple

import msgpack
import zmq

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..", "..")
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "clients"))

import tessera_client as tc  # noqa: E402
from cluster import Cluster  # noqa: E402

Shape = Dict[str, Any]  # n, concurrency, stream


def median(xs: List[float]) -> float:
    return statistics.median(xs)


class Raw:
    """The raw protocol on one thread: keeps `concurrency` requests in flight, counts events by id."""

    def __init__(self, endpoint: str) -> None:
        self.ctx = zmq.Context.instance()
        self.sock = self.ctx.socket(zmq.DEALER)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.connect(endpoint)
        self.next_id = 1

    def run(self, bodies: List[Dict[str, Any]], concurrency: int, stream: bool, lats: List[float]) -> int:
        started: Dict[int, float] = {}
        events = 0
        pending = iter(bodies)

        def send_next() -> None:
            b = next(pending, None)
            if b is None:
                return
            rid = self.next_id
            self.next_id += 1
            msg = {"v": 1, "type": "completion", "id": rid, "stream": stream}
            msg.update(b)
            started[rid] = time.perf_counter()
            self.sock.send(msgpack.packb(msg))

        for _ in range(concurrency):
            send_next()
        while started:
            m = msgpack.unpackb(self.sock.recv(), raw=False)
            rid = m.get("id")
            if rid not in started:
                continue
            if m.get("type") == "token":
                events += 1
                continue
            if m.get("type") == "error":
                raise RuntimeError(f"raw request {rid}: {m}")
            lats.append((time.perf_counter() - started.pop(rid)) * 1e6)
            send_next()
        return events

    def close(self) -> None:
        self.sock.close()


Timed = Tuple[int, float, float]  # token events, wall s, CPU s of the timed span


def sync_client_run(endpoint: str, warm: Dict[str, Any], bodies: List[Dict[str, Any]], concurrency: int,
                    stream: bool, lats: List[float]) -> Timed:
    counts: List[int] = []
    lock = threading.Lock()
    it = iter(bodies)
    with tc.Client(endpoint) as client:
        w = dict(warm)
        client.complete(w.pop("prompt"), **w)  # warm-up: the connection
        def worker() -> None:
            n = 0
            while True:
                with lock:
                    b = next(it, None)
                if b is None:
                    break
                b = dict(b)
                prompt = b.pop("prompt")
                s = time.perf_counter()
                if stream:
                    for ev in client.stream_complete(prompt, **b):
                        if isinstance(ev, tc.TokenEvent):
                            n += 1
                else:
                    client.complete(prompt, **b)
                lats.append((time.perf_counter() - s) * 1e6)
            counts.append(n)
        threads = [threading.Thread(target=worker) for _ in range(concurrency)]
        c0, t0 = time.process_time(), time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return sum(counts), wall, cpu


def async_client_run(endpoint: str, warm: Dict[str, Any], bodies: List[Dict[str, Any]], concurrency: int,
                     stream: bool, lats: List[float]) -> Timed:
    async def main() -> Timed:
        it = iter(bodies)
        async with tc.AsyncClient(endpoint) as client:
            w = dict(warm)
            await client.complete(w.pop("prompt"), **w)  # warm-up: the connection
            async def worker() -> int:
                n = 0
                for b in it:  # tasks share the iterator: no await between next() and use
                    b = dict(b)
                    prompt = b.pop("prompt")
                    s = time.perf_counter()
                    if stream:
                        async for ev in client.stream_complete(prompt, **b):
                            if isinstance(ev, tc.TokenEvent):
                                n += 1
                    else:
                        await client.complete(prompt, **b)
                    lats.append((time.perf_counter() - s) * 1e6)
                return n
            c0, t0 = time.process_time(), time.perf_counter()
            events = sum(await asyncio.gather(*[worker() for _ in range(concurrency)]))
            return events, time.perf_counter() - t0, time.process_time() - c0
    return asyncio.run(main())


def measure(kind: str, endpoint: str, body: Dict[str, Any], shape: Shape) -> Dict[str, float]:
    n, conc, stream = shape["n"], shape["concurrency"], shape["stream"]
    bodies = [dict(body, prompt=f"{body['prompt']} {i % 7}") for i in range(n)]
    lats: List[float] = []
    # Each kind connects and sends one warm-up request first; connect, warm-up and close are
    # outside the timed span.
    if kind == "raw":
        raw = Raw(endpoint)
        raw.run([dict(body)], 1, stream, [])
        c0, t0 = time.process_time(), time.perf_counter()
        events = raw.run(bodies, conc, stream, lats)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        raw.close()
    else:
        fn: Callable[..., Timed] = sync_client_run if kind == "sync" else async_client_run
        events, wall, cpu = fn(endpoint, dict(body), bodies, conc, stream, lats)
    return {"wall_ms": wall * 1e3, "cpu_ms": cpu * 1e3, "events": events, "n": n,
            "lat_us": median(lats)}


def compare(title: str, endpoint: str, body: Dict[str, Any], shape: Shape, runs: int) -> None:
    kinds = ["raw", "sync", "asyncio"]
    res: Dict[str, List[Dict[str, float]]] = {k: [] for k in kinds}
    for r in range(runs):
        for k in kinds[r % 3:] + kinds[:r % 3]:
            res[k].append(measure(k, endpoint, body, shape))
    unit = "event" if shape["stream"] else "request"
    print(f"\n## {title}")
    print(f"| | wall ms (min–max) | token events/s | CPU µs/{unit} | CPU % of wall | request latency p50 µs |")
    print("|---|---|---|---|---|---|")
    out: Dict[str, Dict[str, float]] = {}
    for k in kinds:
        rs = res[k]
        m = {"wall": median([x["wall_ms"] for x in rs]),
             "rate": median([x["events"] / x["wall_ms"] * 1e3 for x in rs]),
             "cpu": median([x["cpu_ms"] * 1e3 / (x["events"] if shape["stream"] else x["n"]) for x in rs]),
             "pct": median([100 * x["cpu_ms"] / x["wall_ms"] for x in rs]),
             "lat": median([x["lat_us"] for x in rs])}
        out[k] = m
        walls = [x["wall_ms"] for x in rs]
        print(f"| {k} | {m['wall']:.0f} ({min(walls):.0f}–{max(walls):.0f}) | {m['rate']:.0f} | {m['cpu']:.1f} | "
              f"{m['pct']:.0f} | {m['lat']:.0f} |")
    for k in kinds[1:]:
        print(f"{k} - raw: latency {out[k]['lat'] - out['raw']['lat']:.0f} µs/request, "
              f"CPU {out[k]['cpu'] - out['raw']['cpu']:.1f} µs/{unit}, "
              f"wall {(out[k]['wall'] / out['raw']['wall'] - 1) * 100:.1f} %")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--bin", default=os.path.join(ROOT, "build", "bin"))
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared"))
    ap.add_argument("--parts", default="123", help="which parts to run (default all: 123)")
    args = ap.parse_args()
    print(f"Python {sys.version.split()[0]}, pyzmq {zmq.__version__}, msgpack {msgpack.version}, "
          f"{args.runs} runs each (medians), raw / sync threads / asyncio in rotated order")
    cluster = Cluster(args.bin, args.shared)
    blaster = subprocess.Popen([sys.executable, os.path.join(HERE, "blaster.py")], stdout=subprocess.PIPE, text=True)
    try:
        fe = cluster.zmq[1]  # the plain frontend (no admin token, no kvstore)
        if "1" in args.parts:
            compare("per-request overhead: 300 sequential non-streamed requests of 1 token (real cluster)", fe,
                    {"prompt": "Once upon a time", "max_tokens": 1, "temperature": 0.0},
                    {"n": 300, "concurrency": 1, "stream": False}, args.runs)
        if "2" in args.parts:
            compare("32 concurrent streams of stories260K, 64 requests x 256 tokens (real cluster)", fe,
                    {"prompt": "Once upon a time", "max_tokens": 256, "temperature": 0.0, "ignore_eos": True},
                    {"n": 64, "concurrency": 32, "stream": True}, args.runs)
        if "3" in args.parts:
            assert blaster.stdout is not None
            synth = blaster.stdout.readline().strip().split("zmq=")[1]
            compare("event-rate ceiling: 32 streams x 2000 events from a synthetic frontend", synth,
                    {"prompt": "x", "max_tokens": 2000}, {"n": 32, "concurrency": 32, "stream": True}, args.runs)
    finally:
        blaster.kill()
        blaster.wait()
        cluster.stop()


if __name__ == "__main__":
    main()
