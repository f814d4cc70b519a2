"""The sandbox behind an adapter: one given by the caller, or one the adapter
creates on first use (and then destroys in close()); used from sync code
(``sandbox``) and from asyncio code (``await asandbox()``) alike."""
import threading

from .aio import AsyncClient, AsyncSandbox
from .client import Client, Sandbox


class OwnedSandbox:
    def __init__(self, sandbox=None, client=None, sandbox_options=None):
        if sandbox is not None and not isinstance(sandbox, (Sandbox, AsyncSandbox, str)):
            raise TypeError(f"sandbox must be a sandlot.Sandbox or a sandbox id, not "
                            f"{type(sandbox).__name__}")
        if isinstance(client, AsyncClient):
            client = _sync_client(client)
        if isinstance(sandbox, AsyncSandbox):
            client = client or _sync_client(sandbox.client)
            sandbox = client.sandbox(sandbox.id)
        if isinstance(sandbox, str):
            sandbox = (client or Client()).sandbox(sandbox)
        self._sandbox = sandbox
        self._client = client if client is not None else (sandbox.client if sandbox else None)
        self._options = dict(sandbox_options or {})
        self._owned = False
        self._async = None
        self._lock = threading.Lock()

    def _client_now(self):
        if self._client is None:
            self._client = Client()
        return self._client

    @property
    def sandbox(self):
        """The sandbox, created now if there is none yet."""
        with self._lock:
            if self._sandbox is None:
                self._sandbox = self._client_now().create(**self._options)
                self._owned = True
            return self._sandbox

    async def asandbox(self):
        """The sandbox as an AsyncSandbox (same id), created now — without
        blocking the event loop — if there is none yet."""
        with self._lock:
            sb = self._sandbox
            aclient = _async_client(self._client_now())
        if sb is None:
            made = await aclient.create(**self._options)
            with self._lock:
                if self._sandbox is None:
                    self._sandbox = self._client.sandbox(made.id)
                    self._sandbox.info = made.info
                    self._owned = True
                    made = None
                sb = self._sandbox
            if made is not None:            # another caller created one meanwhile
                await made.destroy(missing_ok=True)
        with self._lock:
            if self._async is None or self._async.id != sb.id:
                self._async = AsyncSandbox(aclient, sb.id, sb.info)
            return self._async

    @property
    def created(self):
        return self._sandbox is not None

    @property
    def owned(self):
        return self._owned

    def forget(self, sb):
        """Drop ``sb`` (it has ended) so that the next use creates a new one."""
        with self._lock:
            if self._sandbox is not None and self._sandbox.id == sb.id:
                self._sandbox, self._async = None, None

    def close(self):
        """Destroy the sandbox if this object created it."""
        with self._lock:
            sb, owned = self._sandbox, self._owned
            if owned:
                self._sandbox, self._owned, self._async = None, False, None
        if owned and sb is not None:
            sb.destroy(missing_ok=True)

    async def aclose(self):
        with self._lock:
            sb, owned = self._sandbox, self._owned
            if owned:
                self._sandbox, self._owned, self._async = None, False, None
            aclient = _async_client(self._client_now()) if owned else None
        if owned and sb is not None:
            await aclient.sandbox(sb.id).destroy(missing_ok=True)


def _async_client(client):
    """An AsyncClient with the same daemon, token and timeout as ``client``."""
    a = AsyncClient.__new__(AsyncClient)
    a._ep, a.host, a._token, a.timeout = client._ep, client.host, client._token, client.timeout
    return a


def _sync_client(aclient):
    c = Client.__new__(Client)
    c._ep, c.host, c._token, c.timeout = aclient._ep, aclient.host, aclient._token, aclient.timeout
    return c
