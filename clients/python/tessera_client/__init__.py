"""tessera_client: Python client for Tessera's ZeroMQ API (docs/protocol.md, clients/python/README.md)."""
from .admin import DEFAULT_ADMIN_TIMEOUT, AdminClient, AsyncAdminClient, Invalidation, StoredPreference
from .client import (DEFAULT_DEAD_AFTER, DEFAULT_HEARTBEAT_INTERVAL, OPTION_KEYS, AsyncClient, AsyncStream,
                     Client, Stream)
from .errors import (BadRequest, Cancelled, ClientClosed, InternalError, NotFound, Overloaded, PeerDead,
                     PermissionDenied, TesseraError, Timeout, Unavailable, error_for)
from .types import (Completion, FullAttention, H2OPolicy, KvPolicy, Limits, StreamEvent, StreamingPolicy, Timings,
                    TokenEvent, TopLogprob, Usage)

__version__ = "0.1.0"
__all__ = [
    "AdminClient", "AsyncAdminClient", "Invalidation", "StoredPreference", "DEFAULT_ADMIN_TIMEOUT",
    "AsyncClient", "AsyncStream", "Client", "Stream", "OPTION_KEYS", "DEFAULT_DEAD_AFTER",
    "DEFAULT_HEARTBEAT_INTERVAL", "BadRequest", "Cancelled", "ClientClosed", "InternalError", "NotFound",
    "Overloaded", "PeerDead", "PermissionDenied", "TesseraError", "Timeout", "Unavailable", "error_for",
    "Completion", "Limits", "StreamEvent", "Timings", "TokenEvent", "TopLogprob", "Usage",
    "StreamingPolicy", "H2OPolicy", "FullAttention", "KvPolicy",
]
