"""The connection engine shared by Client and AsyncClient.

Ownership and threading: one I/O thread owns the DEALER socket and is the only thread that
touches it. Callers hand it work through a thread-safe command list plus a wake-up pipe that
the I/O thread polls beside the socket. Each request has a `sink` (a callable taking an event
dict or a TesseraError) that the I/O thread calls for its events, in order; the sink must not
block. Invariants: every request submitted ends with exactly one terminal delivery (a `final`
dict or an error) — on a final/error from the frontend, on its deadline (Timeout, after a
`cancel` is sent), when the frontend is declared dead (PeerDead), or on close (ClientClosed).
"""
from __future__ import annotations

import itertools
import os
import threading
import time
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

import msgpack
import zmq

from .errors import ClientClosed, InternalError, PeerDead, TesseraError, Timeout, Unavailable, error_for

Event = Union[Dict[str, Any], TesseraError]
Sink = Callable[[Event], None]


@dataclass
class _Pending:
    sink: Sink
    deadline: Optional[float]  # time.monotonic() seconds, None = none


class Core:
    def __init__(self, endpoints: Sequence[str], heartbeat_interval: float, dead_after: float,
                 context: Optional[zmq.Context] = None) -> None:
        if not endpoints:
            raise ValueError("at least one endpoint is needed")
        if heartbeat_interval <= 0 or dead_after <= heartbeat_interval:
            raise ValueError("need 0 < heartbeat_interval < dead_after")
        self.endpoints = list(endpoints)
        self.heartbeat_interval = heartbeat_interval
        self.dead_after = dead_after
        self._ctx = context or zmq.Context.instance()
        self._ids = itertools.count(1)  # id 0 is reserved by the protocol
        self._lock = threading.Lock()
        self._commands: List[tuple] = []
        self._pending: Dict[int, _Pending] = {}
        self._closed = False
        self._limits: Optional[Dict[str, Any]] = None
        self._limits_cv = threading.Condition(self._lock)
        self._index = 0
        self.failovers = 0
        self._rfd, self._wfd = os.pipe()
        os.set_blocking(self._rfd, False)
        os.set_blocking(self._wfd, False)
        self._thread = threading.Thread(target=self._run, name="tessera-client-io", daemon=True)
        self._thread.start()

    # ---- callers' side (any thread) ----
    def next_id(self) -> int:
        return next(self._ids)

    @property
    def endpoint(self) -> str:
        return self.endpoints[self._index]

    def submit(self, rid: int, body: Dict[str, Any], sink: Sink, timeout: Optional[float]) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        self._command(("send", rid, msgpack.packb(body, use_bin_type=True), _Pending(sink, deadline)))

    def cancel(self, rid: int) -> None:
        self._command(("cancel", rid))

    def limits(self, timeout: float) -> Dict[str, Any]:
        end = time.monotonic() + timeout
        with self._limits_cv:
            while self._limits is None:
                left = end - time.monotonic()
                if self._closed:
                    raise ClientClosed(0, "closed", "the client is closed")
                if left <= 0:
                    raise Unavailable(400, "unavailable", f"no heartbeat reply from {self.endpoints} "
                                      f"within {timeout:.1f} s")
                self._limits_cv.wait(left)
            return dict(self._limits)

    def close(self) -> None:
        self._command(("close",))
        if threading.current_thread() is not self._thread:
            self._thread.join(5.0)

    def _command(self, cmd: tuple) -> None:
        with self._lock:
            if self._closed:
                if cmd[0] == "send":
                    cmd[3].sink(ClientClosed(0, "closed", "the client is closed"))
                return
            self._commands.append(cmd)
            try:
                os.write(self._wfd, b"x")
            except BlockingIOError:
                pass  # the pipe is full: the I/O thread is already woken

    # ---- the I/O thread ----
    def _connect(self) -> zmq.Socket:
        s = self._ctx.socket(zmq.DEALER)
        s.setsockopt(zmq.LINGER, 0)
        s.setsockopt(zmq.RECONNECT_IVL, 100)
        s.setsockopt(zmq.RECONNECT_IVL_MAX, 1000)  # reconnect with backoff up to 1 s
        s.connect(self.endpoint)
        return s

    def _run(self) -> None:
        try:
            self._loop()
        except BaseException as e:  # noqa: BLE001 - a bug here must not leave callers waiting
            err = str(e) or type(e).__name__
            self._fail_all(lambda rid: InternalError(500, "internal", f"client I/O thread failed: {err}", rid))
        finally:
            with self._lock:
                self._closed = True
                rest, self._commands = self._commands, []
                self._limits_cv.notify_all()
            for c in rest:
                if c[0] == "send":
                    c[3].sink(ClientClosed(0, "closed", "the client is closed", c[1]))
            os.close(self._rfd)
            os.close(self._wfd)

    def _loop(self) -> None:
        sock = self._connect()
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(self._rfd, zmq.POLLIN)
        last_rx = time.monotonic()  # a fresh connection gets dead_after to answer
        next_hb = 0.0
        running = True
        while running:
            now = time.monotonic()
            if now >= next_hb:
                _send(sock, msgpack.packb({"v": 1, "type": "heartbeat", "id": self.next_id()}))
                next_hb = now + self.heartbeat_interval
            wake = next_hb
            for p in self._pending.values():
                if p.deadline is not None and p.deadline < wake:
                    wake = p.deadline
            events = dict(poller.poll(max(0, int((wake - now) * 1000)) + 1))
            if self._rfd in events:
                running = self._drain_commands(sock)
            if sock in events:
                while True:
                    try:
                        frames = sock.recv_multipart(zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    last_rx = time.monotonic()
                    self._on_message(frames[-1])
            now = time.monotonic()
            self._expire(sock, now)
            if running and now - last_rx > self.dead_after:
                # The frontend is dead: fail what runs on it and fail over to the next endpoint.
                dead = self.endpoint
                self._fail_all(lambda rid: PeerDead(401, "peer_dead", f"frontend {dead} did not answer "
                                                    f"heartbeats for {self.dead_after:.1f} s", rid))
                poller.unregister(sock)
                sock.close(0)
                with self._lock:
                    self._index = (self._index + 1) % len(self.endpoints)
                    self._limits = None
                    self.failovers += 1
                sock = self._connect()
                poller.register(sock, zmq.POLLIN)
                last_rx = time.monotonic()
                next_hb = 0.0
        self._fail_all(lambda rid: ClientClosed(0, "closed", "the client was closed", rid))
        sock.close(0)

    def _drain_commands(self, sock: zmq.Socket) -> bool:
        try:
            while os.read(self._rfd, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            cmds, self._commands = self._commands, []
        for cmd in cmds:
            if cmd[0] == "send":
                _, rid, body, pending = cmd
                if _send(sock, body):
                    self._pending[rid] = pending
                else:
                    pending.sink(Unavailable(400, "unavailable", f"the send queue to {self.endpoint} "
                                             "is full (frontend not reachable)", rid))
            elif cmd[0] == "cancel":
                if cmd[1] in self._pending:
                    _send(sock, msgpack.packb({"v": 1, "type": "cancel", "id": cmd[1]}))
            elif cmd[0] == "close":
                with self._lock:
                    self._closed = True
                    rest, self._commands = self._commands, []
                    self._limits_cv.notify_all()
                for c in rest:
                    if c[0] == "send":
                        c[3].sink(ClientClosed(0, "closed", "the client is closed", c[1]))
                return False
        return True

    def _on_message(self, body: bytes) -> None:
        try:
            msg = msgpack.unpackb(body, raw=False)
        except Exception:  # noqa: BLE001 - an undecodable reply is dropped, as the protocol does
            return
        if not isinstance(msg, dict):
            return
        kind = msg.get("type")
        if kind == "heartbeat":
            with self._limits_cv:
                self._limits = msg
                self._limits_cv.notify_all()
            return
        rid = int(msg.get("id", 0) or 0)
        p = self._pending.get(rid)
        if p is None:
            return  # a request already ended here (deadline, id 0 errors of unreadable messages)
        if kind == "error":
            del self._pending[rid]
            p.sink(error_for(int(msg.get("code", 0)), str(msg.get("message", "")),
                             str(msg.get("error", "")), rid))
        elif kind == "final":
            del self._pending[rid]
            p.sink(msg)
        elif kind == "token":
            p.sink(msg)

    def _expire(self, sock: zmq.Socket, now: float) -> None:
        late = [rid for rid, p in self._pending.items() if p.deadline is not None and p.deadline <= now]
        for rid in late:
            p = self._pending.pop(rid)
            _send(sock, msgpack.packb({"v": 1, "type": "cancel", "id": rid}))
            p.sink(Timeout(203, "deadline_exceeded", f"request {rid} ran past its deadline", rid))

    def _fail_all(self, make: Callable[[int], TesseraError]) -> None:
        pending, self._pending = self._pending, {}
        for rid, p in pending.items():
            p.sink(make(rid))


def _send(sock: zmq.Socket, body: bytes) -> bool:
    """Sends without blocking; False when the queue to the peer is full."""
    try:
        sock.send(body, zmq.NOBLOCK)
        return True
    except zmq.Again:
        return False
