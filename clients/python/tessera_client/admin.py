"""Admin operations of a frontend (docs/api.md "Admin"): a user's stored preference (set / get /
delete) and the invalidation of the user's preference K/V.

The ZeroMQ client API has no admin messages, so AdminClient calls the frontend's HTTP admin
routes (the frontend needs --admin-token and --kvstore) with the admin token as
`Authorization: Bearer` — the same operations, by the same names, as the C++ and Node clients'
AdminClient. Standard library only (urllib).

Errors are this package's typed errors, carrying the protocol's code and name: the frontend's
error body names the code (`{"error": {"code": "not_found", ...}}`); without one the HTTP status
decides (400 BadRequest, 401/403 PermissionDenied, 404 NotFound, 413 BadRequest, 429 Overloaded,
503 Unavailable, 504 Timeout). A frontend that cannot be reached raises Unavailable (400), no
answer within `timeout` raises Timeout (203).

Threading: AdminClient holds only its settings; every call opens its own HTTP connection and
blocks until the answer or the timeout, so it may be used from any number of threads at once.
AsyncAdminClient runs the same calls on the event loop's default executor.
"""
from __future__ import annotations

import asyncio
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Dict, Optional

from .errors import _NAMES, error_for

_NUMBER_OF: Dict[str, int] = {name: code for code, name in _NAMES.items()}
_BY_STATUS: Dict[int, int] = {400: 100, 401: 106, 403: 106, 404: 104, 405: 100, 413: 105, 429: 201,
                              503: 400, 504: 203}

DEFAULT_ADMIN_TIMEOUT = 10.0


@dataclass(frozen=True)
class StoredPreference:
    """A user's stored preference. `stored` (set_preference only) is the kvstore's answer
    (`{"l1": bool, "l2": bool}`: written to its L1 / to Redis); None from get_preference."""
    user: str
    preference: str
    alpha: float
    stored: Optional[Dict[str, Any]] = None


@dataclass(frozen=True)
class Invalidation:
    """What invalidate() dropped: entries in the kvstore's L1 and in Redis (both include the
    stored-preference entry itself), and how many schedulers were sent `invalidate_user`."""
    user: str
    kvstore_l1: int
    kvstore_l2: int
    schedulers_notified: int


class AdminClient:
    """Admin calls to one frontend's HTTP API.

    `base_url`: "http://host:port" of the frontend's HTTP port; `token`: its --admin-token;
    `timeout`: seconds for a whole call (connect, send, answer)."""

    def __init__(self, base_url: str, *, token: str = "", timeout: float = DEFAULT_ADMIN_TIMEOUT) -> None:
        parsed = urllib.parse.urlsplit(base_url)
        if parsed.scheme not in ("http", "https") or not parsed.netloc:
            raise error_for(100, f"base_url must be http://host:port, got {base_url!r}")
        self.base_url = base_url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def set_preference(self, user: str, preference: str, alpha: float = 0.5) -> StoredPreference:
        """Stores `preference` (non-empty) with `alpha` in [0, 1] for `user`."""
        j = self._call("PUT", user, "preference", {"preference": preference, "alpha": alpha})
        return StoredPreference(str(j.get("user", user)), str(j.get("preference", preference)),
                                float(j.get("alpha", alpha)), j.get("stored"))

    def get_preference(self, user: str) -> StoredPreference:
        """The stored preference of `user`; raises NotFound (104) when none is stored."""
        j = self._call("GET", user, "preference")
        return StoredPreference(str(j.get("user", user)), str(j["preference"]), float(j["alpha"]))

    def delete_preference(self, user: str) -> bool:
        """Deletes the stored preference of `user`; whether there was one."""
        return bool(self._call("DELETE", user, "preference").get("deleted", False))

    def invalidate(self, user: str) -> Invalidation:
        """Drops the user's preference K/V in every tier (kvstore L1 and Redis) and tells every
        scheduler of the frontend; the stored preference text is kept."""
        j = self._call("POST", user, "invalidate")
        kv = j.get("kvstore") or {}
        return Invalidation(str(j.get("user", user)), int(kv.get("l1", 0)), int(kv.get("l2", 0)),
                            int(j.get("schedulers_notified", 0)))

    def _call(self, method: str, user: str, action: str, body: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        url = f"{self.base_url}/admin/v1/users/{urllib.parse.quote(user, safe='')}/{action}"
        headers = {"Authorization": f"Bearer {self.token}"}
        data = None
        if body is not None:
            headers["Content-Type"] = "application/json"
            data = json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, headers=headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                status, text = r.status, r.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as e:  # a non-2xx answer: its body names the error
            status, text = e.code, e.read().decode("utf-8", "replace")
            e.close()
        except (socket.timeout, TimeoutError) as e:
            raise error_for(203, f"{method} {url}: no answer in {self.timeout} s") from e
        except urllib.error.URLError as e:
            if isinstance(e.reason, (socket.timeout, TimeoutError)):
                raise error_for(203, f"{method} {url}: no answer in {self.timeout} s") from e
            raise error_for(400, f"{method} {url}: {e.reason}") from e
        except OSError as e:  # e.g. the connection reset while reading
            raise error_for(400, f"{method} {url}: {e}") from e
        try:
            j: Any = json.loads(text)
        except ValueError:
            j = None
        if 200 <= status < 300 and isinstance(j, dict):
            return j
        err = j.get("error") if isinstance(j, dict) else None
        err = err if isinstance(err, dict) else {}
        code = _NUMBER_OF.get(str(err.get("code", ""))) or _BY_STATUS.get(status, 500)
        message = err.get("message") or f"{method} {url}: HTTP {status} {text[:200]}"
        raise error_for(code, str(message))


class AsyncAdminClient:
    """AdminClient for asyncio: the same calls, awaited (each runs in the loop's default executor)."""

    def __init__(self, base_url: str, *, token: str = "", timeout: float = DEFAULT_ADMIN_TIMEOUT) -> None:
        self._sync = AdminClient(base_url, token=token, timeout=timeout)

    @property
    def base_url(self) -> str:
        return self._sync.base_url

    async def set_preference(self, user: str, preference: str, alpha: float = 0.5) -> StoredPreference:
        return await asyncio.get_running_loop().run_in_executor(None, self._sync.set_preference, user,
                                                                preference, alpha)

    async def get_preference(self, user: str) -> StoredPreference:
        return await asyncio.get_running_loop().run_in_executor(None, self._sync.get_preference, user)

    async def delete_preference(self, user: str) -> bool:
        return await asyncio.get_running_loop().run_in_executor(None, self._sync.delete_preference, user)

    async def invalidate(self, user: str) -> Invalidation:
        return await asyncio.get_running_loop().run_in_executor(None, self._sync.invalidate, user)


__all__ = ["AdminClient", "AsyncAdminClient", "StoredPreference", "Invalidation", "DEFAULT_ADMIN_TIMEOUT"]
