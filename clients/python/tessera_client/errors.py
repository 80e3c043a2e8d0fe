"""Typed errors carrying the protocol's error code, name and message (docs/protocol.md "Error codes")."""
from __future__ import annotations

from typing import Dict, Type


class TesseraError(Exception):
    """Base of every error this package raises. `code` is the protocol's number (0 when the
    error was raised by the client itself without one), `name` its name, `message` the text."""

    def __init__(self, code: int, name: str, message: str, request_id: int = 0) -> None:
        super().__init__(f"{code} {name}: {message}" if code else message)
        self.code = code
        self.name = name
        self.message = message
        self.request_id = request_id


class BadRequest(TesseraError):
    """100 invalid_argument, 101 malformed_message, 102 unsupported, 103 out_of_range,
    105 too_large, 402 protocol_mismatch: the request is wrong; do not retry it as is."""


class NotFound(BadRequest):
    """104 not_found (e.g. an unknown model name)."""


class PermissionDenied(TesseraError):
    """106 permission_denied."""


class Overloaded(TesseraError):
    """200 resource_exhausted, 201 overloaded: retry later."""


class Cancelled(TesseraError):
    """202 cancelled by an operator (a caller's own cancel ends with finish_reason "cancelled")."""


class Timeout(TesseraError):
    """203 deadline_exceeded: the request's deadline passed (client side: it was cancelled)."""


class Unavailable(TesseraError):
    """400 unavailable: no scheduler/worker ready, or no frontend reachable."""


class PeerDead(TesseraError):
    """401 peer_dead: the frontend (client side: it stopped answering heartbeats), or the
    scheduler/worker running the request, died; the request is over and may be retried."""


class InternalError(TesseraError):
    """300-302 file problems and 500 internal."""


class ClientClosed(TesseraError):
    """The client was closed while the request was in flight (or before it was sent)."""


_BY_CODE: Dict[int, Type[TesseraError]] = {
    100: BadRequest, 101: BadRequest, 102: BadRequest, 103: BadRequest, 104: NotFound,
    105: BadRequest, 106: PermissionDenied, 200: Overloaded, 201: Overloaded, 202: Cancelled,
    203: Timeout, 300: InternalError, 301: InternalError, 302: InternalError, 400: Unavailable,
    401: PeerDead, 402: BadRequest, 500: InternalError,
}

_NAMES: Dict[int, str] = {
    100: "invalid_argument", 101: "malformed_message", 102: "unsupported", 103: "out_of_range",
    104: "not_found", 105: "too_large", 106: "permission_denied", 200: "resource_exhausted",
    201: "overloaded", 202: "cancelled", 203: "deadline_exceeded", 300: "io_error",
    301: "corrupt_file", 302: "truncated_file", 400: "unavailable", 401: "peer_dead",
    402: "protocol_mismatch", 500: "internal",
}


def error_for(code: int, message: str, name: str = "", request_id: int = 0) -> TesseraError:
    """The typed error for a protocol `code` (unknown codes give TesseraError)."""
    cls = _BY_CODE.get(code, TesseraError)
    return cls(code, name or _NAMES.get(code, "unknown"), message, request_id)
