"""Results and events of the client API (docs/protocol.md "token", "final", "heartbeat")."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Union


@dataclass(frozen=True)
class TopLogprob:
    token: int
    logprob: float


@dataclass(frozen=True)
class TokenEvent:
    """One `token` event: new token ids and the text that became visible with them (may be "")."""
    request_id: int
    tokens: List[int]
    text: str
    logprobs: Optional[List[float]] = None
    top_logprobs: Optional[List[List[TopLogprob]]] = None


@dataclass(frozen=True)
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    # Preference provenance (docs/api.md "Preference injection"); None without a preference.
    preference_source: Optional[str] = None
    preference_kv_bytes: Optional[int] = None
    preference_transfer_ms: Optional[float] = None


@dataclass(frozen=True)
class Timings:
    queue_ms: float = 0.0
    ttft_ms: float = 0.0
    decode_ms: float = 0.0
    total_ms: float = 0.0


@dataclass(frozen=True)
class Completion:
    """The outcome of a completion or chat. For a stream, `text`/`tokens`/`logprobs` are the
    concatenation of its token events, so a streamed and a non-streamed request compare equal."""
    request_id: int
    text: str
    tokens: List[int]
    finish_reason: str
    usage: Usage
    timings: Timings
    logprobs: Optional[List[float]] = None
    top_logprobs: Optional[List[List[TopLogprob]]] = None


StreamEvent = Union[TokenEvent, Completion]


# K/V retention policies, the request option `kv_policy` (docs/api.md, docs/kv.md). The defaults
# are the HTTP API's (sinks 4, recent budget / 2) and always sent, so a request means the same
# over ZeroMQ (whose wire defaults are 0) and HTTP. Ranges are checked by the frontend
# (sinks + window and budget at most the context: BadRequest 103 out_of_range).
@dataclass(frozen=True)
class StreamingPolicy:
    """StreamingLLM: keep the first `sinks` positions and the last `window`; may generate past the context."""
    window: int
    sinks: int = 4

    def to_wire(self) -> Dict[str, Any]:
        return {"type": "streaming", "sinks": int(self.sinks), "window": int(self.window)}


@dataclass(frozen=True)
class H2OPolicy:
    """H2O: keep `budget` positions, the `recent` most recent (default budget // 2) and the most attended."""
    budget: int
    recent: Optional[int] = None

    def to_wire(self) -> Dict[str, Any]:
        recent = int(self.budget) // 2 if self.recent is None else int(self.recent)
        return {"type": "h2o", "budget": int(self.budget), "recent": recent}


@dataclass(frozen=True)
class FullAttention:
    """No retention policy (full attention), overriding the frontend's --kv-policy."""

    def to_wire(self) -> Dict[str, Any]:
        return {"type": "none"}


KvPolicy = Union[StreamingPolicy, H2OPolicy, FullAttention]


def kv_policy_wire(v: Any) -> Dict[str, Any]:
    """The wire map of a `kv_policy` option: a typed policy, or a dict as docs/protocol.md writes it."""
    if isinstance(v, (StreamingPolicy, H2OPolicy, FullAttention)):
        return v.to_wire()
    if isinstance(v, dict):
        return dict(v)
    raise TypeError("kv_policy must be a StreamingPolicy, H2OPolicy, FullAttention or a dict, not "
                    f"{type(v).__name__}")


@dataclass(frozen=True)
class Limits:
    """What the frontend's heartbeat reply says about the served model (None: not reported yet)."""
    model: str
    protocol_version: int
    context_length: Optional[int]
    page_size: Optional[int]
    max_prompt_tokens: Optional[int]
    vocab_size: Optional[int]
    default_max_tokens: Optional[int]
    live_workers: int = 0
    running: int = 0
    waiting: int = 0
    endpoint: str = ""
    raw: Dict[str, Any] = field(default_factory=dict, compare=False, repr=False)


def _top(v: Any) -> Optional[List[List[TopLogprob]]]:
    if v is None:
        return None
    return [[TopLogprob(int(t["token"]), float(t["logprob"])) for t in alts] for alts in v]


def token_event(msg: Dict[str, Any]) -> TokenEvent:
    lp = msg.get("logprobs")
    return TokenEvent(int(msg.get("id", 0)), list(msg.get("tokens") or []), msg.get("text") or "",
                      None if lp is None else [float(x) for x in lp], _top(msg.get("top_logprobs")))


def completion_from(msg: Dict[str, Any], events: Optional[List[TokenEvent]] = None) -> Completion:
    """A Completion from a `final`; with `events` (a stream) text/tokens/logprobs are theirs."""
    u = msg.get("usage") or {}
    t = msg.get("timings") or {}
    usage = Usage(int(u.get("prompt_tokens", 0)), int(u.get("completion_tokens", 0)),
                  int(u.get("cached_tokens", 0)), u.get("preference_source"),
                  u.get("preference_kv_bytes"), u.get("preference_transfer_ms"))
    timings = Timings(float(t.get("queue_ms", 0.0)), float(t.get("ttft_ms", 0.0)),
                      float(t.get("decode_ms", 0.0)), float(t.get("total_ms", 0.0)))
    rid = int(msg.get("id", 0))
    reason = str(msg.get("finish_reason", ""))
    if events is None:
        lp = msg.get("logprobs")
        return Completion(rid, msg.get("text") or "", list(msg.get("tokens") or []), reason, usage,
                          timings, None if lp is None else [float(x) for x in lp],
                          _top(msg.get("top_logprobs")))
    tokens: List[int] = []
    lps: Optional[List[float]] = None
    tops: Optional[List[List[TopLogprob]]] = None
    for e in events:
        tokens.extend(e.tokens)
        if e.logprobs is not None:
            lps = (lps or []) + e.logprobs
        if e.top_logprobs is not None:
            tops = (tops or []) + e.top_logprobs
    return Completion(rid, "".join(e.text for e in events), tokens, reason, usage, timings, lps, tops)


def limits_from(msg: Dict[str, Any], endpoint: str) -> Limits:
    def opt(k: str) -> Optional[int]:
        v = msg.get(k)
        return None if v is None else int(v)
    return Limits(str(msg.get("model", msg.get("name", ""))), int(msg.get("protocol_version", 1)),
                  opt("context_length"), opt("page_size"), opt("max_prompt_tokens"),
                  opt("vocab_size"), opt("default_max_tokens"), int(msg.get("live_workers", 0)),
                  int(msg.get("running", 0)), int(msg.get("waiting", 0)), endpoint, dict(msg))
