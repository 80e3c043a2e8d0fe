"""Client (threads) and AsyncClient (asyncio) over one DEALER connection (docs/protocol.md).

Both share the engine in _core.py: one I/O thread owns the socket, so a Client may be used
from any number of threads at once and an AsyncClient from one event loop. Requests are
independent: many may be in flight on one connection, matched by `id`.
"""
from __future__ import annotations

import asyncio
import queue
from typing import Any, AsyncIterator, Dict, Iterator, List, Mapping, Optional, Sequence, Union

from ._core import Core, Event
from .errors import BadRequest, TesseraError
from .types import (Completion, Limits, StreamEvent, TokenEvent, completion_from, kv_policy_wire, limits_from,
                    token_event)

Message = Mapping[str, str]  # {"role": "system"|"user"|"assistant", "content": str}

# Request fields a caller may set (docs/protocol.md "completion and chat"), besides
# prompt/prompt_tokens/messages. `logit_bias` may be a {token: bias} dict; `kv_policy` a
# StreamingPolicy, H2OPolicy or FullAttention (types.py) or the wire map.
OPTION_KEYS = frozenset({
    "model", "max_tokens", "temperature", "top_p", "top_k", "min_p", "repetition_penalty",
    "presence_penalty", "frequency_penalty", "seed", "logit_bias", "logprobs", "top_logprobs",
    "stop", "stop_token_ids", "ignore_eos", "user", "preference", "preference_alpha",
    "priority", "routing_key", "kv_policy",
})

DEFAULT_HEARTBEAT_INTERVAL = 0.5
DEFAULT_DEAD_AFTER = 1.5


def _body(kind: str, rid: int, stream: bool, fields: Dict[str, Any], options: Dict[str, Any]) -> Dict[str, Any]:
    unknown = set(options) - OPTION_KEYS
    if unknown:
        raise BadRequest(100, "invalid_argument", f"unknown request option(s): {', '.join(sorted(unknown))}")
    body: Dict[str, Any] = {"v": 1, "type": kind, "id": rid, "stream": stream}
    body.update(fields)
    for k, v in options.items():
        if v is None:
            continue
        if k == "logit_bias" and isinstance(v, Mapping):
            v = [{"token": int(t), "bias": float(b)} for t, b in v.items()]
        if k == "kv_policy":
            try:
                v = kv_policy_wire(v)
            except TypeError as e:
                raise BadRequest(100, "invalid_argument", str(e)) from None
        body[k] = v
    return body


def _completion_fields(prompt: Union[str, Sequence[int]]) -> Dict[str, Any]:
    if isinstance(prompt, str):
        return {"prompt": prompt}
    return {"prompt_tokens": [int(t) for t in prompt]}


def _chat_fields(messages: Sequence[Message]) -> Dict[str, Any]:
    return {"messages": [{"role": m["role"], "content": m["content"]} for m in messages]}


class _StreamState:
    """What Stream and AsyncStream share: turning the core's events into token events and the
    final Completion (raising a TesseraError the core delivered)."""

    _streaming: bool
    _events: List[TokenEvent]
    _result: Optional[Completion]

    def _accept(self, ev: Event) -> StreamEvent:
        if isinstance(ev, TesseraError):
            raise ev
        if ev.get("type") == "token":
            te = token_event(ev)
            self._events.append(te)
            return te
        self._result = completion_from(ev, self._events if self._streaming else None)
        return self._result


class Stream(_StreamState):
    """A streamed request: iterate for TokenEvents; the last item is the Completion. Raises the
    request's TesseraError. `cancel()` stops it (the final then has finish_reason "cancelled")."""

    def __init__(self, core: Core, rid: int, streaming: bool = True) -> None:
        self._core = core
        self._streaming = streaming
        self.request_id = rid
        self._q: "queue.Queue[Event]" = queue.Queue()
        self._events: List[TokenEvent] = []
        self._result: Optional[Completion] = None

    def _sink(self, ev: Event) -> None:
        self._q.put(ev)

    def __iter__(self) -> Iterator[StreamEvent]:
        while self._result is None:
            # the core guarantees a terminal event (deadline, peer death, close)
            yield self._accept(self._q.get())

    def result(self) -> Completion:
        """Consumes the rest of the stream and returns its Completion."""
        for _ in self:
            pass
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        self._core.cancel(self.request_id)


class AsyncStream(_StreamState):
    """The asyncio form of Stream: `async for ev in stream`."""

    def __init__(self, core: Core, rid: int, loop: asyncio.AbstractEventLoop, streaming: bool = True) -> None:
        self._core = core
        self._streaming = streaming
        self.request_id = rid
        self._loop = loop
        self._q: "asyncio.Queue[Event]" = asyncio.Queue()
        self._events: List[TokenEvent] = []
        self._result: Optional[Completion] = None

    def _sink(self, ev: Event) -> None:
        try:
            self._loop.call_soon_threadsafe(self._q.put_nowait, ev)
        except RuntimeError:
            pass  # the loop is closed: nobody waits for this request any more

    def __aiter__(self) -> AsyncIterator[StreamEvent]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[StreamEvent]:
        while self._result is None:
            yield self._accept(await self._q.get())

    async def result(self) -> Completion:
        async for _ in self:
            pass
        assert self._result is not None
        return self._result

    def cancel(self) -> None:
        self._core.cancel(self.request_id)


class _Base:
    def __init__(self, endpoints: Union[str, Sequence[str]], *, heartbeat_interval: float,
                 dead_after: float, timeout: Optional[float]) -> None:
        eps = [endpoints] if isinstance(endpoints, str) else list(endpoints)
        self._core = Core(eps, heartbeat_interval, dead_after)
        self.default_timeout = timeout

    @property
    def endpoint(self) -> str:
        """The endpoint in use now (it changes on failover)."""
        return self._core.endpoint

    @property
    def failovers(self) -> int:
        """How many times a dead frontend made the client move to the next endpoint."""
        return self._core.failovers

    def cancel(self, request_id: int) -> None:
        """Cancels a request in flight (unknown or finished ids are ignored)."""
        self._core.cancel(request_id)

    def close(self) -> None:
        """Ends every request in flight with ClientClosed and closes the socket."""
        self._core.close()

    def _timeout(self, timeout: Optional[float]) -> Optional[float]:
        return self.default_timeout if timeout is None else timeout


class Client(_Base):
    """A thread-safe client. `endpoints`: one "tcp://host:port" or a list tried in order (on a
    dead frontend the client moves to the next one). A frontend silent for `dead_after` seconds
    (heartbeats every `heartbeat_interval`) is declared dead: its requests in flight raise
    PeerDead within dead_after + heartbeat_interval of its death. `timeout` is the default
    per-request deadline in seconds (None: none); past it the request is cancelled and raises
    Timeout."""

    def __init__(self, endpoints: Union[str, Sequence[str]], *,
                 heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
                 dead_after: float = DEFAULT_DEAD_AFTER, timeout: Optional[float] = None) -> None:
        super().__init__(endpoints, heartbeat_interval=heartbeat_interval, dead_after=dead_after, timeout=timeout)

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def limits(self, timeout: float = 5.0) -> Limits:
        """The served model's limits from the frontend's heartbeat reply (waits for one)."""
        return limits_from(self._core.limits(timeout), self._core.endpoint)

    def _start(self, kind: str, fields: Dict[str, Any], stream: bool, timeout: Optional[float],
               options: Dict[str, Any]) -> Stream:
        rid = self._core.next_id()
        body = _body(kind, rid, stream, fields, options)
        s = Stream(self._core, rid, stream)
        self._core.submit(rid, body, s._sink, self._timeout(timeout))
        return s

    def complete(self, prompt: Union[str, Sequence[int]], *, timeout: Optional[float] = None,
                 **options: Any) -> Completion:
        """A completion of `prompt` (text, or token ids), waited for. Options: OPTION_KEYS."""
        return self._start("completion", _completion_fields(prompt), False, timeout, options).result()

    def chat(self, messages: Sequence[Message], *, timeout: Optional[float] = None, **options: Any) -> Completion:
        """A chat completion of `messages` ({"role", "content"} maps), waited for."""
        return self._start("chat", _chat_fields(messages), False, timeout, options).result()

    def stream_complete(self, prompt: Union[str, Sequence[int]], *, timeout: Optional[float] = None,
                        **options: Any) -> Stream:
        """A streamed completion: iterate the returned Stream."""
        return self._start("completion", _completion_fields(prompt), True, timeout, options)

    def stream_chat(self, messages: Sequence[Message], *, timeout: Optional[float] = None, **options: Any) -> Stream:
        return self._start("chat", _chat_fields(messages), True, timeout, options)


class AsyncClient(_Base):
    """The asyncio client: the same concepts and defaults as Client; create it inside the event
    loop that uses it. Coroutines: limits, complete, chat; stream_* return AsyncStreams."""

    def __init__(self, endpoints: Union[str, Sequence[str]], *,
                 heartbeat_interval: float = DEFAULT_HEARTBEAT_INTERVAL,
                 dead_after: float = DEFAULT_DEAD_AFTER, timeout: Optional[float] = None) -> None:
        super().__init__(endpoints, heartbeat_interval=heartbeat_interval, dead_after=dead_after, timeout=timeout)

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await asyncio.get_running_loop().run_in_executor(None, self._core.close)

    async def limits(self, timeout: float = 5.0) -> Limits:
        raw = await asyncio.get_running_loop().run_in_executor(None, self._core.limits, timeout)
        return limits_from(raw, self._core.endpoint)

    def _start(self, kind: str, fields: Dict[str, Any], stream: bool, timeout: Optional[float],
               options: Dict[str, Any]) -> AsyncStream:
        rid = self._core.next_id()
        body = _body(kind, rid, stream, fields, options)
        s = AsyncStream(self._core, rid, asyncio.get_running_loop(), stream)
        self._core.submit(rid, body, s._sink, self._timeout(timeout))
        return s

    async def complete(self, prompt: Union[str, Sequence[int]], *, timeout: Optional[float] = None,
                       **options: Any) -> Completion:
        return await self._start("completion", _completion_fields(prompt), False, timeout, options).result()

    async def chat(self, messages: Sequence[Message], *, timeout: Optional[float] = None,
                   **options: Any) -> Completion:
        return await self._start("chat", _chat_fields(messages), False, timeout, options).result()

    def stream_complete(self, prompt: Union[str, Sequence[int]], *, timeout: Optional[float] = None,
                        **options: Any) -> AsyncStream:
        return self._start("completion", _completion_fields(prompt), True, timeout, options)

    def stream_chat(self, messages: Sequence[Message], *, timeout: Optional[float] = None,
                    **options: Any) -> AsyncStream:
        return self._start("chat", _chat_fields(messages), True, timeout, options)
