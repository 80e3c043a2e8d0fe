"""A foreign (Python) client of tessera-kvstore, as docs/kvstore.md shows it.

usage: foreign_client.py ENDPOINT BLOB_FILE FINGERPRINT [CURVE_DIR]
With CURVE_DIR (a `tessera keys` directory) it connects as a CURVE client with the frontend's
key pair and the kvstore's public key (docs/security.md).
Puts the blob for user "py-user", gets it back, checks the bytes, sends one malformed request,
and prints "ok" on success (exit 1 with a reason otherwise). Run with /usr/bin/python3
(python3-zmq, python3-msgpack).
"""
import sys

import msgpack
import zmq


def call(sock, msg):
    sock.send(msgpack.packb(msg, use_bin_type=True))
    if not sock.poll(10000):
        sys.exit("no reply to %r" % msg.get("type"))
    return msgpack.unpackb(sock.recv(), raw=False)


def read_keys(path):
    """public-key / secret-key of a tessera keys (czmq-style) certificate file."""
    keys = {}
    for line in open(path):
        name, _, value = line.partition("=")
        if name.strip() in ("public-key", "secret-key"):
            keys[name.strip()] = value.strip().strip('"').encode()
    return keys


def main():
    endpoint, blob_file, fingerprint = sys.argv[1], sys.argv[2], int(sys.argv[3])
    blob = open(blob_file, "rb").read()
    sock = zmq.Context().socket(zmq.DEALER)
    sock.setsockopt(zmq.LINGER, 0)
    if len(sys.argv) > 4:
        own = read_keys(sys.argv[4] + "/frontend.key_secret")
        sock.curve_serverkey = read_keys(sys.argv[4] + "/kvstore.key")["public-key"]
        sock.curve_publickey = own["public-key"]
        sock.curve_secretkey = own["secret-key"]
    sock.connect(endpoint)
    key = {"fingerprint": fingerprint, "user": "py-user", "hash": "pref-1"}
    r = call(sock, dict(v=1, type="put", id=1, blob=blob, **key))
    if r.get("type") != "put_reply" or r.get("id") != 1 or not r.get("stored_l1"):
        sys.exit("bad put reply: %r" % r)
    r = call(sock, dict(v=1, type="get", id=2, **key))
    if r.get("type") != "get_reply" or not r.get("found") or r.get("tier") != "l1" or r.get("blob") != blob:
        sys.exit("bad get reply: %r" % {k: v for k, v in r.items() if k != "blob"})
    r = call(sock, dict(v=1, type="get", id=3, fingerprint=fingerprint, user="someone-else", hash="pref-1"))
    if r.get("found") is not False:
        sys.exit("another user's key found the blob: %r" % r)
    sock.send(b"\xc1 not msgpack")
    if not sock.poll(10000):
        sys.exit("no reply to garbage")
    r = msgpack.unpackb(sock.recv(), raw=False)
    if r.get("type") != "error" or r.get("code") != 101 or r.get("error") != "malformed_message":
        sys.exit("bad error reply: %r" % r)
    r = call(sock, dict(v=1, type="stats", id=4))
    if "tessera_kvstore_hits_total" not in r.get("metrics", ""):
        sys.exit("bad stats reply")
    print("ok")


if __name__ == "__main__":
    main()
