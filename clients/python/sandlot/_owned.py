"""The sandbox behind an adapter: one given by the caller, or one the adapter
creates on first use (and then destroys in close())."""
import threading

from .client import Client, Sandbox


class OwnedSandbox:
    def __init__(self, sandbox=None, client=None, sandbox_options=None):
        if sandbox is not None and not isinstance(sandbox, (Sandbox, str)):
            raise TypeError(f"sandbox must be a sandlot.Sandbox or a sandbox id, not "
                            f"{type(sandbox).__name__}")
        if isinstance(sandbox, str):
            sandbox = (client or Client()).sandbox(sandbox)
        self._sandbox = sandbox
        self._client = client
        self._options = dict(sandbox_options or {})
        self._owned = False
        self._lock = threading.Lock()

    @property
    def sandbox(self):
        """The sandbox, created now if there is none yet."""
        with self._lock:
            if self._sandbox is None:
                self._client = self._client or Client()
                self._sandbox = self._client.create(**self._options)
                self._owned = True
            return self._sandbox

    @property
    def created(self):
        return self._sandbox is not None

    def close(self):
        """Destroy the sandbox if this object created it."""
        with self._lock:
            sb, owned = self._sandbox, self._owned
            if owned:
                self._sandbox, self._owned = None, False
        if owned and sb is not None:
            sb.destroy(missing_ok=True)
