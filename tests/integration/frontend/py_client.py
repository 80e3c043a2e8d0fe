#!/usr/bin/python3
"""A Tessera client written only from docs/protocol.md (Debian python3-zmq + python3-msgpack).

usage: py_client.py ENDPOINT PROMPT MAX_TOKENS
Sends one streamed completion over the ZeroMQ client API and prints
  TEXT: <the streamed text>
  FINISH: <finish_reason>
  USAGE: prompt=<n> completion=<n> cached=<n>
Exit status 0 on a final event, 1 on an error event or timeout.
"""
import sys

import msgpack
import zmq


def main():
    endpoint, prompt, max_tokens = sys.argv[1], sys.argv[2], int(sys.argv[3])
    ctx = zmq.Context()
    sock = ctx.socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    sock.connect(endpoint)
    request = {
        "v": 1,
        "type": "completion",
        "id": 1,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "stream": True,
    }
    sock.send(msgpack.packb(request, use_bin_type=True))
    text = ""
    poller = zmq.Poller()
    poller.register(sock, zmq.POLLIN)
    while True:
        if not poller.poll(10000):
            print("ERROR: no reply within 10 s")
            return 1
        frames = sock.recv_multipart()
        msg = msgpack.unpackb(frames[-1], raw=False)
        if msg.get("id") != 1:
            continue
        if msg["type"] == "token":
            text += msg["text"]
        elif msg["type"] == "final":
            usage = msg["usage"]
            print("TEXT: " + text)
            print("FINISH: " + msg["finish_reason"])
            print("USAGE: prompt=%d completion=%d cached=%d"
                  % (usage["prompt_tokens"], usage["completion_tokens"], usage["cached_tokens"]))
            return 0
        elif msg["type"] == "error":
            print("ERROR %d %s: %s" % (msg["code"], msg["error"], msg["message"]))
            return 1


if __name__ == "__main__":
    sys.exit(main())
