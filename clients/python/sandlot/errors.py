"""The exceptions of the sandlot client: one hierarchy under SandlotError.

Refusals by sandlotd (its ``{"error": {"code": ..., "message": ...}}`` answers)
become an ``APIError`` subclass chosen by the error code, then by the HTTP
status; each carries ``code``, ``message``, ``status`` and the whole error
object as ``details`` (``state`` and ``end_reason`` for an ended sandbox).
Problems on the way to the daemon are ``TransportError`` subclasses.
"""
import json

__all__ = [
    "SandlotError", "ConfigError", "TransportError", "DaemonUnreachableError",
    "ConnectionLostError", "RequestTimeoutError", "ProtocolError", "APIError",
    "BadRequestError", "AuthError", "NotFoundError", "ConflictError",
    "SandboxPausedError", "ContextBusyError", "SandboxEndedError",
    "PayloadTooLargeError", "TooManySandboxesError", "InsufficientStorageError",
    "PackageInstallError",
    "ServiceUnavailableError", "ServerError", "error_from_response",
]


class SandlotError(Exception):
    """Base of every error raised by this package."""


class ConfigError(SandlotError, ValueError):
    """A bad host, an unreadable or empty token file, a token with a line break."""


class TransportError(SandlotError):
    """The request did not get an answer from sandlotd."""

    def __init__(self, message, host=None):
        super().__init__(message)
        self.host = host


class DaemonUnreachableError(TransportError, ConnectionError):
    """Nothing accepted the connection (no daemon, wrong socket path or port)."""


class ConnectionLostError(TransportError, ConnectionError):
    """The connection broke after it was made."""


class RequestTimeoutError(TransportError, TimeoutError):
    """sandlotd did not answer within the client's timeout."""


class ProtocolError(SandlotError):
    """sandlotd answered something this client cannot read (not its JSON)."""


class APIError(SandlotError):
    """sandlotd refused the request.

    Attributes: ``status`` (HTTP status), ``code`` (the daemon's machine code,
    e.g. ``not_found``), ``message`` (its one-line message), ``details`` (the
    whole ``error`` object).
    """

    def __init__(self, status, code, message, details=None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.details = dict(details or {})

    def __str__(self):
        return f"{self.message} ({self.code}, HTTP {self.status})"

    def __repr__(self):
        return f"{type(self).__name__}(status={self.status!r}, code={self.code!r}, message={self.message!r})"


class BadRequestError(APIError, ValueError):
    """400: a field, value or path the daemon does not accept."""


class AuthError(APIError, PermissionError):
    """401 (no or wrong bearer token on TCP) or 403 (forbidden)."""


class NotFoundError(APIError, LookupError):
    """404: no such sandbox, file, context or route."""


class ConflictError(APIError):
    """409: the object is not in a state that allows the request."""


class SandboxPausedError(ConflictError):
    """409 sandbox_paused: resume it first, or create it with auto_resume."""

    @property
    def state(self):
        return self.details.get("state")


class ContextBusyError(ConflictError):
    """409 context_busy: the code context is running another cell."""


class SandboxEndedError(APIError):
    """410 sandbox_ended / sandbox_gone: the sandbox is no longer running."""

    @property
    def state(self):
        return self.details.get("state")

    @property
    def end_reason(self):
        return self.details.get("end_reason")


class PayloadTooLargeError(APIError):
    """413 payload_too_large / 414 uri_too_long, and 413 too_large: a download over
    the size limit (sandlotd --max-download, or the call's max_bytes)."""


class TooManySandboxesError(APIError):
    """429 too_many_sandboxes: the daemon's --max-sandboxes, or host capacity."""


class PackageInstallError(APIError):
    """422 package_install_failed / installer_missing: packages could not be
    installed; ``output`` has what pip or npm printed."""

    @property
    def output(self):
        return self.details.get("output", "")


class InsufficientStorageError(APIError, OSError):
    """507 insufficient_storage: the sandbox's disk quota is full."""


class ServiceUnavailableError(APIError):
    """503 shutting_down, or node_full: this node of a fleet has no room (retry
    elsewhere, or later: nothing was allocated)."""


class ServerError(APIError):
    """500 internal (and any other 5xx)."""


_BY_CODE = {
    "sandbox_paused": SandboxPausedError,
    "context_busy": ContextBusyError,
    "sandbox_ended": SandboxEndedError,
    "sandbox_gone": SandboxEndedError,
    "too_many_sandboxes": TooManySandboxesError,
    "insufficient_storage": InsufficientStorageError,
    "shutting_down": ServiceUnavailableError,
    "package_install_failed": PackageInstallError,
    "installer_missing": PackageInstallError,
}
_BY_STATUS = {
    400: BadRequestError, 401: AuthError, 403: AuthError, 404: NotFoundError,
    405: BadRequestError, 409: ConflictError, 410: SandboxEndedError,
    413: PayloadTooLargeError, 414: PayloadTooLargeError, 429: TooManySandboxesError,
    503: ServiceUnavailableError, 507: InsufficientStorageError,
}


def error_from_response(status, body, context=None):
    """Build the APIError for an error answer (status >= 400) with raw body
    bytes.  ``context`` (e.g. "sb-…:/etc/x") is put before a message that
    does not already name it."""
    code, message, details = None, None, {}
    try:
        obj = json.loads(body.decode("utf-8")) if body else None
        if isinstance(obj, dict) and isinstance(obj.get("error"), dict):
            details = obj["error"]
            code = details.get("code")
            message = details.get("message")
    except (ValueError, UnicodeDecodeError):
        pass
    if not code:
        code = f"http_{status}"
    if not message:
        text = body.decode("utf-8", "replace").strip() if body else ""
        message = f"sandlotd answered HTTP {status}" + (f": {text[:200]}" if text else "")
    if context and context not in message:
        message = f"{context}: {message}"
    cls = _BY_CODE.get(code) or _BY_STATUS.get(status) or (ServerError if status >= 500 else APIError)
    return cls(status, code, message, details)
