#!/usr/bin/python3
"""A synthetic frontend for bench.py (the Python twin of bench/node_client/blaster.mjs): a ROUTER
that answers every `completion` with `max_tokens` pre-encoded `token` events and a `final` as fast
as it can, and every `heartbeat` with a heartbeat, so the client's own per-event cost is what
limits the event rate.

usage: blaster.py   (prints "LISTENING zmq=...", serves until killed)
"""
import msgpack
import zmq


def main() -> None:
    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.setsockopt(zmq.SNDHWM, 0)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    print(f"LISTENING zmq=tcp://127.0.0.1:{port}", flush=True)
    while True:
        identity, body = sock.recv_multipart()
        msg = msgpack.unpackb(body, raw=False)
        if msg.get("type") == "heartbeat":
            sock.send_multipart([identity, msgpack.packb({"v": 1, "type": "heartbeat", "id": msg.get("id", 0),
                                                          "role": "frontend", "live_workers": 1})])
            continue
        if msg.get("type") != "completion":
            continue
        rid = msg["id"]
        ev = msgpack.packb({"v": 1, "type": "token", "id": rid, "tokens": [42], "text": " tok"})
        for _ in range(int(msg["max_tokens"])):
            sock.send_multipart([identity, ev])
        n = int(msg["max_tokens"])
        sock.send_multipart([identity, msgpack.packb({
            "v": 1, "type": "final", "id": rid, "finish_reason": "length", "text": "", "tokens": [],
            "usage": {"prompt_tokens": 1, "completion_tokens": n, "cached_tokens": 0},
            "timings": {"queue_ms": 0, "ttft_ms": 0, "decode_ms": 0, "total_ms": 0}})])


if __name__ == "__main__":
    main()
