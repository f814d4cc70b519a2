"""A client for sandlotd's HTTP API (spec/openapi.yaml), standard library only.

    from sandlot import Client

    client = Client()                      # SANDLOT_HOST, or the default unix socket
    with client.create(memory="1G") as sb:  # destroyed when the block ends
        r = sb.exec("echo hi")
        print(r.exit_code, r.stdout)

The daemon is chosen like the ``sandlot`` CLI does it: the ``host`` argument,
else ``SANDLOT_HOST``, else ``unix:/run/sandlot/sandlot.sock``; forms
``unix:PATH`` (or ``/PATH``), ``tcp:HOST:PORT``, ``http://HOST:PORT`` and
``https://HOST[:PORT]``.  The bearer token for TCP comes from ``token``, else
``token_file`` (its first line), else ``SANDLOT_TOKEN``, else the file named by
``SANDLOT_TOKEN_FILE``.

Every request opens its own connection, so one Client (and its Sandbox
handles) may be used from many threads at once.  Timeouts given to exec and
code calls are in seconds, like Python's; the daemon's are milliseconds.
"""
import base64
import http.client
import io
import json
import os
import socket
import ssl
import stat as _stat
import tarfile
import tempfile
import urllib.parse

from .errors import (
    ConfigError, ConflictError, ConnectionLostError, DaemonUnreachableError, NotFoundError,
    ProtocolError,
    RequestTimeoutError, SandboxEndedError, error_from_response,
)

__all__ = [
    "Client", "Sandbox", "ExecResult", "CodeResult", "ExecStream", "CodeStream",
    "DEFAULT_HOST",
]

DEFAULT_HOST = "unix:/run/sandlot/sandlot.sock"
_TOKEN_FILE_MAX = 4096
_CHUNK = 64 * 1024
# How long past a command's own timeout the client waits for the daemon's
# answer before it gives up on the connection.
_TIMEOUT_MARGIN = 30.0
_DAEMON_EXEC_DEFAULT_S = 300.0
_UNSET = object()


# ---------------------------------------------------------------------------
# where the daemon is

class _Endpoint:
    """A parsed host: kind "unix", "tcp" or "https"; ``name`` is how messages
    name it (unix:PATH, tcp:HOST:PORT or the URL)."""

    def __init__(self, spec):
        self.spec = spec
        s = spec.strip()
        if s.startswith("/"):
            s = "unix:" + s
        if s.startswith("unix:"):
            self.kind, self.path = "unix", s[5:]
            if not self.path:
                raise self._bad()
            self.name = s
            return
        if s.startswith("tcp:"):
            hostport = s[4:]
            self.kind = "tcp"
        elif s.startswith(("http://", "https://")):
            u = urllib.parse.urlsplit(s)
            if not u.hostname:
                raise self._bad()
            self.kind = "https" if u.scheme == "https" else "tcp"
            self.host = u.hostname
            try:
                self.port = u.port or (443 if u.scheme == "https" else 80)
            except ValueError:
                raise self._bad() from None
            self.name = s.rstrip("/")
            return
        else:
            raise self._bad()
        host, sep, port = hostport.rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise self._bad()
        if host.startswith("[") and host.endswith("]"):
            host = host[1:-1]
        self.host, self.port = host, int(port)
        self.name = s

    def _bad(self):
        return ConfigError(f'invalid host "{self.spec}": expected unix:PATH, tcp:HOST:PORT '
                           f'or http://HOST:PORT')


class _UnixHTTPConnection(http.client.HTTPConnection):
    """HTTP/1.1 over a unix stream socket."""

    def __init__(self, path, timeout=None):
        super().__init__("localhost", timeout=timeout, blocksize=_CHUNK)
        self.unix_path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.connect(self.unix_path)
        except BaseException:
            s.close()
            raise
        self.sock = s


def _read_token_file(path):
    try:
        with open(path, "rb") as f:
            data = f.read(_TOKEN_FILE_MAX)
    except OSError as e:
        raise ConfigError(f"cannot read token file {path}: {e.strerror or e}") from None
    line = data.decode("utf-8", "replace").splitlines()[0] if data else ""
    line = line.strip()
    if not line:
        raise ConfigError(f"token file {path} is empty")
    return line


def _resolve_token(token, token_file):
    if token is None:
        if token_file is None:
            env_token = os.environ.get("SANDLOT_TOKEN")
            if env_token:
                token = env_token
            else:
                token_file = os.environ.get("SANDLOT_TOKEN_FILE") or None
        if token is None and token_file is not None:
            token = _read_token_file(os.fspath(token_file))
    if token is not None:
        token = str(token)
        if "\r" in token or "\n" in token:
            raise ConfigError("the token contains a line break")
        if not token:
            token = None
    return token


def _seconds_to_ms(timeout, what="timeout"):
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or timeout < 0:
        raise ValueError(f"{what} must be a number of seconds >= 0, got {timeout!r}")
    return int(round(timeout * 1000))


# ---------------------------------------------------------------------------
# results

class _Record:
    """A daemon JSON object with its fields as attributes; ``raw`` is the dict
    and item access (``r["stdout"]``) works too."""

    _fields = ()

    def __init__(self, raw):
        self.raw = raw
        for f in self._fields:
            setattr(self, f, raw.get(f))

    def __getitem__(self, key):
        return self.raw[key]

    def get(self, key, default=None):
        return self.raw.get(key, default)

    def to_dict(self):
        return dict(self.raw)

    def __eq__(self, other):
        return isinstance(other, type(self)) and other.raw == self.raw

    def __repr__(self):
        shown = ", ".join(f"{f}={getattr(self, f)!r}" for f in self._fields[:6])
        return f"{type(self).__name__}({shown}, ...)"


class ExecResult(_Record):
    """How a command ended (the ExecResult schema).

    ``exit_code`` is None when a signal killed it (``signal`` says which;
    ``timed_out`` / ``oom_killed`` say why).  ``stdout``/``stderr`` are text,
    or base64 when the exec asked for ``output="base64"`` (``stdout_bytes`` and
    ``stderr_bytes`` decode either).  ``changes`` is what the command did to
    /home/user; ``changes_truncated`` says the list is incomplete (the
    daemon's size limits: ``changes(since)`` pages through what its log
    keeps)."""

    _fields = ("exec_id", "exit_code", "signal", "timed_out", "oom_killed", "pids_limited",
               "truncated", "duration_ms", "stdout", "stderr", "error", "changes",
               "changes_truncated", "cursor")

    def __init__(self, raw, encoding="text"):
        super().__init__(raw)
        self.encoding = encoding
        self.stdout = self.stdout or ""
        self.stderr = self.stderr or ""
        self.changes = self.changes or []

    @property
    def ok(self):
        return self.exit_code == 0

    def _bytes(self, s):
        return base64.b64decode(s) if self.encoding == "base64" else s.encode("utf-8")

    @property
    def stdout_bytes(self):
        return self._bytes(self.stdout)

    @property
    def stderr_bytes(self):
        return self._bytes(self.stderr)

    @property
    def status(self):
        """One number like the CLI's exit status: the exit code; 124 for a
        timeout; 128+N for signal N; 125 when it could not run at all."""
        if self.timed_out:
            return 124
        if self.exit_code is not None:
            return self.exit_code
        if self.signal:
            return 128 + self.signal
        return 125


class CodeResult(_Record):
    """The result of one cell (the CodeResult schema): ``status`` is "ok",
    "error", "interrupted" or "timeout"; ``value`` the repr of the last
    expression; ``error`` {name, value, traceback} or None; ``displays`` rich
    outputs (matplotlib figures as image/png base64)."""

    _fields = ("context", "status", "stdout", "stderr", "value", "data", "displays", "error",
               "execution_count", "exit_code", "cwd", "duration_ms", "state_lost", "changes",
               "changes_truncated")

    def __init__(self, raw):
        super().__init__(raw)
        self.stdout = self.stdout or ""
        self.stderr = self.stderr or ""
        self.displays = self.displays or []
        self.data = self.data or {}
        self.changes = self.changes or []

    @property
    def ok(self):
        return self.status == "ok"

    @property
    def error_text(self):
        """The error as a Python-style report ("Traceback ...\\nName: value"),
        or "" without an error."""
        if not self.error:
            return ""
        tb = self.error.get("traceback") or []
        head = "".join(line if line.endswith("\n") else line + "\n" for line in tb)
        last = f"{self.error.get('name', 'Error')}: {self.error.get('value', '')}".rstrip(": ")
        if head.rstrip().endswith(last):
            return head.rstrip("\n")
        return (head + last).rstrip("\n")


# ---------------------------------------------------------------------------
# streams

class _ExecEvents:
    """How an exec's events set the stream's fields (sync and asyncio)."""

    def _init_events(self):
        self.exec_id = None
        self.pid = None
        self.encoding = "text"
        self.result = None

    def _take(self, ev):
        t = ev.get("type")
        if t == "start":
            self.exec_id = ev.get("exec_id")
            self.pid = ev.get("pid")
            self.encoding = ev.get("output") or "text"
        elif t == "exit":
            self.result = ExecResult(ev.get("result") or {}, self.encoding)
        return ev

    def _final(self):
        if self.result is None:
            raise ProtocolError(f"{self._what}: the stream ended without an exit event")
        return self.result


class _CodeEvents:
    """How a cell's messages set the stream's result (sync and asyncio)."""

    def _init_events(self):
        self.result = None

    def _take(self, ev):
        if ev.get("type") == "result":
            self.result = CodeResult({k: v for k, v in ev.items() if k != "type"})
        return ev

    def _final(self):
        if self.result is None:
            raise ProtocolError(f"{self._what}: the stream ended without a result")
        return self.result


def _event(what, line):
    """One NDJSON line as an event dict, or None for a blank line."""
    line = line.strip()
    if not line:
        return None
    try:
        return json.loads(line)
    except ValueError:
        raise ProtocolError(f"{what}: not a JSON line: {line[:200]!r}") from None


class _NDJSONStream:
    """An open NDJSON answer: iterate for events (dicts) as they arrive."""

    def __init__(self, conn, resp, what):
        self._conn, self._resp, self._what = conn, resp, what
        self._done = False

    def _events(self):
        try:
            while True:
                try:
                    line = self._resp.readline()
                except socket.timeout:
                    raise RequestTimeoutError(f"{self._what}: no event from sandlotd within "
                                              f"{self._conn.timeout}s") from None
                except (OSError, http.client.HTTPException) as e:
                    raise ConnectionLostError(f"{self._what}: the stream broke: {e}") from None
                if not line:
                    break
                ev = _event(self._what, line)
                if ev is not None:
                    yield ev
        finally:
            self._done = True
            self.close()

    def close(self):
        """Close the connection.  A command still running is killed by the
        daemon when its stream's client goes away."""
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class ExecStream(_ExecEvents, _NDJSONStream):
    """A command's live events, in order: ``{"type": "start", "exec_id",
    "pid", "output"}``, ``{"type": "stdout"|"stderr", "data"}`` (text, or
    base64 with output="base64"), and last ``{"type": "exit", "result"}``.

    After the exit event ``result`` is the ExecResult; ``wait()`` reads what
    is left and returns it.  ``close()`` before the end kills the command."""

    def __init__(self, conn, resp, what):
        super().__init__(conn, resp, what)
        self._init_events()
        self._it = self._events()

    def __iter__(self):
        return self

    def __next__(self):
        return self._take(next(self._it))

    def wait(self):
        for _ in self:
            pass
        return self._final()


class CodeStream(_CodeEvents, _NDJSONStream):
    """A cell's live messages (``stdout``, ``stderr``, ``display``) ending
    with ``{"type": "result", ...}``; ``result`` is then the CodeResult."""

    def __init__(self, conn, resp, what):
        super().__init__(conn, resp, what)
        self._init_events()
        self._it = self._events()

    def __iter__(self):
        return self

    def __next__(self):
        return self._take(next(self._it))

    def wait(self):
        for _ in self:
            pass
        return self._final()


class _Download(io.RawIOBase):
    """A file-like reader over a streamed download; closes its connection."""

    def __init__(self, conn, resp, what):
        super().__init__()
        self._conn, self._resp, self._what = conn, resp, what
        self.length = resp.length

    def readable(self):
        return True

    def readinto(self, b):
        try:
            n = self._resp.readinto(b)
        except socket.timeout:
            raise RequestTimeoutError(f"{self._what}: sandlotd stopped sending") from None
        except (OSError, http.client.HTTPException) as e:
            # The answer is chunked and ends with a last chunk: a stream the
            # daemon cut (or a connection that died) lacks it.
            raise ConnectionLostError(f"{self._what}: the download was cut short ({e!r}): "
                                      "what arrived is incomplete") from None
        return n

    def close(self):
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        super().close()


# ---------------------------------------------------------------------------
# the client

class _ClientBase:
    """What Client and the asyncio AsyncClient share: where the daemon is,
    the token, and how requests are made and answers read."""

    def __init__(self, host=None, *, token=None, token_file=None, timeout=60.0):
        spec = host or os.environ.get("SANDLOT_HOST") or DEFAULT_HOST
        self._ep = _Endpoint(str(spec))
        self.host = self._ep.name
        self._token = _resolve_token(token, token_file)
        self.timeout = timeout

    def __repr__(self):
        return f"{type(self).__name__}({self.host!r})"

    def _prepare(self, method, path, query=None, json_body=None, body=None, headers=None):
        """The request target (path and query), headers and body of a call:
        shared by this client and the asyncio one (sandlot.aio)."""
        url = path
        if query:
            items = [(k, v) for k, v in query.items() if v is not None] if isinstance(query, dict) else query
            if items:
                url += "?" + urllib.parse.urlencode(items, quote_via=urllib.parse.quote)
        h = {"Accept": "application/json"}
        if json_body is not None:
            body = json.dumps(json_body).encode("utf-8")
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        if self._token:
            h["Authorization"] = f"Bearer {self._token}"
        return url, h, body

    def _unreachable(self, e):
        """The DaemonUnreachableError for a failed connect (OSError or timeout)."""
        if isinstance(e, (socket.timeout, TimeoutError)):
            return DaemonUnreachableError(f"cannot reach sandlotd at {self.host}: connection timed out",
                                          self.host)
        reason = e.strerror or str(e)
        return DaemonUnreachableError(f"cannot reach sandlotd at {self.host}: {reason} "
                                      f"(is it running? start it with: sandlotd)", self.host)

    def _refusal(self, status, data, context):
        """The APIError for an error answer (status >= 400) with body ``data``."""
        err = error_from_response(status, data, context)
        if status == 401:
            err.message = (f"sandlotd at {self.host} refused the token (check SANDLOT_TOKEN, "
                           f"SANDLOT_TOKEN_FILE or token=)" if self._token else
                           f"sandlotd at {self.host} needs a token: set SANDLOT_TOKEN or pass token=")
            err.args = (err.message,)
        return err

    @staticmethod
    def _decode(what, status, data, expect_json=True):
        """A JSON answer's value (None for 204, an empty body or expect_json=False)."""
        if not expect_json or status == 204 or not data:
            return None
        try:
            return json.loads(data)
        except ValueError:
            raise ProtocolError(f"{what}: sandlotd answered something that is not JSON: "
                                f"{data[:200]!r}") from None



class Client(_ClientBase):
    """A connection profile for one sandlotd.

    ``host``: see the module's doc; ``token`` / ``token_file``: the bearer
    token for TCP; ``timeout``: seconds to wait for an answer to calls that
    do not run user code (create, files, list...), None for no limit."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    # -- transport -------------------------------------------------------
    def _connection(self, timeout):
        ep = self._ep
        if ep.kind == "unix":
            return _UnixHTTPConnection(ep.path, timeout=timeout)
        if ep.kind == "https":
            return http.client.HTTPSConnection(ep.host, ep.port, timeout=timeout, blocksize=_CHUNK,
                                               context=ssl.create_default_context())
        return http.client.HTTPConnection(ep.host, ep.port, timeout=timeout, blocksize=_CHUNK)

    def _open(self, method, path, *, query=None, json_body=None, body=None, headers=None,
              timeout=_UNSET, context=None):
        """Send a request; returns (conn, resp) with the status checked and
        the body unread.  Raises an APIError for an error answer."""
        if timeout is _UNSET:
            timeout = self.timeout
        url, h, body = self._prepare(method, path, query, json_body, body, headers)
        what = f"{method} {path}"
        conn = self._connection(timeout)
        try:
            conn.connect()
        except OSError as e:
            conn.close()
            raise self._unreachable(e) from None
        try:
            conn.request(method, url, body=body, headers=h)
            resp = conn.getresponse()
        except socket.timeout:
            conn.close()
            raise RequestTimeoutError(f"{what}: no answer from sandlotd at {self.host} within "
                                      f"{timeout}s", self.host) from None
        except (OSError, http.client.HTTPException) as e:
            # A request body the daemon refused before reading it all (an
            # upload to an unknown sandbox, past what it drains) breaks the
            # pipe; its error answer may still be there to read.
            broke = isinstance(e, (BrokenPipeError, ConnectionResetError))
            resp = _late_answer(conn, method) if broke else None
            if resp is None:
                conn.close()
                raise ConnectionLostError(f"{what}: the connection to sandlotd at {self.host} broke: "
                                          f"{e}", self.host) from None
        if resp.status >= 400:
            try:
                data = resp.read(1 << 20)
            except (OSError, http.client.HTTPException):
                data = b""
            finally:
                conn.close()
            raise self._refusal(resp.status, data, context)
        return conn, resp

    def _call(self, method, path, *, expect_json=True, **kw):
        conn, resp = self._open(method, path, **kw)
        what = f"{method} {path}"
        try:
            data = resp.read()
        except socket.timeout:
            raise RequestTimeoutError(f"{what}: sandlotd stopped answering", self.host) from None
        except (OSError, http.client.HTTPException) as e:
            raise ConnectionLostError(f"{what}: the answer broke off: {e}", self.host) from None
        finally:
            conn.close()
        return self._decode(what, resp.status, data, expect_json)

    # -- daemon ----------------------------------------------------------
    def health(self):
        """GET /v1/health: {"status", "version", "sandboxes", "uptime_seconds", ...}."""
        return self._call("GET", "/v1/health")

    def metrics(self):
        """The Prometheus text of GET /metrics."""
        conn, resp = self._open("GET", "/metrics")
        try:
            return resp.read().decode("utf-8")
        finally:
            conn.close()

    # -- sandboxes -------------------------------------------------------
    def create(self, *, image=None, memory=None, cpus=None, pids=None, disk=None, env=None,
               network=None, packages=None, ttl_seconds=None, idle_timeout_seconds=None,
               metadata=None, auto_resume=None, paused_retention_seconds=None, from_snapshot=None,
               ports=None, allowed_domains=None, **extra):
        """Create a sandbox (POST /v1/sandboxes); returns its Sandbox.

        Sizes are bytes or strings like "512M"; ``metadata`` are labels
        (str -> str); ``from_snapshot`` the id of a paused or expired
        sandbox whose files the new one starts with; ``ports`` the ports to
        expose (see Sandbox.ports).  ``network`` is a policy ({"mode":
        "allowlist", "allow": [...], "deny": [...]}, "none" or "open";
        docs/network.md), ``allowed_domains`` a shorthand for an allowlist of
        those names; ``packages`` ({"pip": [...], "npm": [...]}) are installed
        before this returns (PackageInstallError with the installers' output
        if they cannot be).  Other options of POST /v1/sandboxes pass through
        as keywords, e.g. ``isolation="vm"`` for a microVM of its own
        (docs/vm.md).  Options the daemon does not know are refused by it
        (BadRequestError naming the field)."""
        body = _create_body(image=image, memory=memory, cpus=cpus, pids=pids, disk=disk, env=env,
                            network=network, allowed_domains=allowed_domains, packages=packages,
                            ttl_seconds=ttl_seconds, idle_timeout_seconds=idle_timeout_seconds,
                            metadata=metadata, auto_resume=auto_resume,
                            paused_retention_seconds=paused_retention_seconds,
                            from_snapshot=from_snapshot, ports=ports, **extra)
        info = self._call("POST", "/v1/sandboxes", json_body=body,
                          timeout=None if packages else _UNSET)
        return Sandbox(self, info["id"], info)

    def get(self, sandbox_id):
        """The sandbox with this id, its record fetched (any state; NotFoundError
        for ids never seen or forgotten)."""
        info = self._call("GET", f"/v1/sandboxes/{_q(sandbox_id)}")
        return Sandbox(self, info["id"], info)

    def sandbox(self, sandbox_id):
        """A handle on a sandbox by id, without a request."""
        return Sandbox(self, sandbox_id)

    def list(self, *, state=None, labels=None):
        """Sandboxes, oldest first: running ones, or those in ``state``
        ("paused", "expired", ..., "all"); ``labels`` {key: value} must all
        match their metadata."""
        out = self._call("GET", "/v1/sandboxes", query=_list_query(state, labels))
        return [Sandbox(self, s["id"], s) for s in out.get("sandboxes", [])]

    def destroy(self, sandbox_id):
        """DELETE the sandbox: kills everything, removes its files."""
        self._call("DELETE", f"/v1/sandboxes/{_q(sandbox_id)}", expect_json=False,
                   context=f"sandbox {sandbox_id}")


def _create_body(allowed_domains=None, **options):
    """The CreateSandbox body: the options that are not None (``network``
    from network= and allowed_domains=)."""
    network = _network(options.get("network"), allowed_domains)
    options["network"] = {"mode": network} if isinstance(network, str) else network
    if options.get("ports") is not None:
        options["ports"] = list(options["ports"])
    return {k: v for k, v in options.items() if v is not None}


def _list_query(state, labels):
    query = []
    if state is not None:
        query.append(("state", state))
    for k, v in (labels or {}).items():
        query.append(("label", f"{k}={v}"))
    return query


def _policy_body(network, allow, deny):
    """The PUT .../network body from set_network()'s arguments."""
    if network is None:
        network = {"mode": "allowlist" if allow is not None else "none"}
    elif isinstance(network, str):
        network = {"mode": network}
    else:
        network = dict(network)
    if allow is not None:
        network["allow"] = list(allow)
    if deny is not None:
        network["deny"] = list(deny)
    return network


def _packages_body(pip, npm):
    body = {k: list(v) for k, v in (("pip", pip), ("npm", npm)) if v}
    if not body:
        raise ValueError("give pip= or npm= packages to install")
    return body


def _network(network, allowed_domains):
    """The "network" field from create()'s network= and allowed_domains=."""
    if allowed_domains is None:
        return network
    if isinstance(allowed_domains, str):
        raise ValueError("allowed_domains must be a list of host names, not one string")
    if network not in (None, "allowlist") and not (isinstance(network, dict) and
                                                   network.get("mode", "allowlist") == "allowlist"):
        raise ValueError("allowed_domains needs an allowlist: leave network= out")
    policy = dict(network) if isinstance(network, dict) else {}
    policy["mode"] = "allowlist"
    policy["allow"] = list(policy.get("allow", [])) + [str(d) for d in allowed_domains]
    return policy


def _late_answer(conn, method):
    """The error answer sent before the daemon stopped reading our body, if
    one can be read from the socket; else None."""
    if conn.sock is None:
        return None
    try:
        resp = http.client.HTTPResponse(conn.sock, method=method)
        resp.begin()
    except (OSError, http.client.HTTPException):
        return None
    return resp if resp.status >= 400 else None


def _q(s):
    return urllib.parse.quote(str(s), safe="")


def _body_and_length(data):
    """(body, headers) for an upload of bytes, str, a file object or an
    iterable of bytes: a length header when the length is known, else none,
    and http.client sends the body chunked."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return bytes(data), {"Content-Length": str(len(data))}
    if hasattr(data, "read"):
        try:
            st = os.fstat(data.fileno())
            pos = data.tell()
            if _stat.S_ISREG(st.st_mode):
                return data, {"Content-Length": str(st.st_size - pos)}
        except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
            pass
        return _chunks(data), {}
    try:
        iter(data)
    except TypeError:
        raise TypeError(f"upload data must be bytes, str, a file object or an iterable of bytes, "
                        f"not {type(data).__name__}") from None
    return _chunks_iter(data), {}


def _chunks(f):
    while True:
        b = f.read(_CHUNK)
        if not b:
            return
        if isinstance(b, str):
            b = b.encode("utf-8")
        yield b


def _chunks_iter(it):
    for b in it:
        if isinstance(b, str):
            b = b.encode("utf-8")
        if b:
            yield bytes(b)


class _SandboxBase:
    """What Sandbox and the asyncio AsyncSandbox share: the record, and the
    bodies of the requests they send."""

    def __init__(self, client, sandbox_id, info=None):
        self.client = client
        self.id = sandbox_id
        self.info = info or {}

    def __repr__(self):
        return f"{type(self).__name__}({self.id!r}, state={self.info.get('state')!r})"

    @property
    def state(self):
        return self.info.get("state")

    @property
    def metadata(self):
        return self.info.get("metadata") or {}

    def _path(self, tail=""):
        return f"/v1/sandboxes/{_q(self.id)}{tail}"

    def _set(self, info):
        if info:
            self.info = info
        return self

    def _exec_body(self, command, argv, cwd, env, stdin, timeout, output, output_limit):
        if (command is None) == (argv is None):
            raise ValueError("give exactly one of command (a shell string) and argv (a list)")
        body = {}
        if command is not None:
            body["command"] = command
        else:
            if isinstance(argv, (str, bytes)):
                raise ValueError("argv must be a list of strings; use command= for a shell string")
            body["argv"] = [str(a) for a in argv]
        if cwd is not None:
            body["cwd"] = cwd
        if env:
            body["env"] = dict(env)
        if stdin is not None:
            if isinstance(stdin, str):
                body["stdin"] = stdin
            else:
                body["stdin_base64"] = base64.b64encode(bytes(stdin)).decode("ascii")
        ms = _seconds_to_ms(timeout)
        if ms is not None:
            body["timeout_ms"] = ms
        if output != "text":
            if output != "base64":
                raise ValueError(f'output must be "text" or "base64", not {output!r}')
            body["output"] = output
        if output_limit is not None:
            body["output_limit"] = output_limit
        # The daemon ends the command at its timeout; wait that long and a
        # margin for its answer.
        wait = None if ms == 0 else (ms / 1000 if ms else _DAEMON_EXEC_DEFAULT_S) + _TIMEOUT_MARGIN
        return body, wait

    def _code_body(self, code, language, context, timeout):
        if not isinstance(code, str):
            raise TypeError(f"code must be a string, not {type(code).__name__}")
        body = {"code": code}
        if context is not None:
            body["context"] = _context_id(context)
        if language is not None:
            body["language"] = language
        if "context" not in body and "language" not in body:
            body["language"] = "python"
        ms = _seconds_to_ms(timeout)
        if ms == 0:
            ms = None
        if ms is not None:
            body["timeout_ms"] = ms
        # Interrupt after the timeout; a stuck interpreter is killed 5 s later.
        wait = None if ms is None else ms / 1000 + 5 + _TIMEOUT_MARGIN
        return body, wait

    def _set_ports(self, ports):
        if self.info:
            self.info = dict(self.info, ports=ports)
        return ports

    def _port_entry(self, ports, port, via):
        """(url, headers) for exposed ``port`` given the current ``ports``."""
        entry = next((p for p in ports if p["port"] == port), None)
        if entry is None:
            exposed = ", ".join(str(p["port"]) for p in ports) or "none"
            raise NotFoundError(404, "port_not_exposed",
                                f"port {port} is not exposed in sandbox {self.id} "
                                f"(exposed: {exposed})")
        ep = self.client._ep
        if via is None:
            via = "url" if ep.kind == "unix" else "proxy"
        if via == "url":
            if not entry["url"]:
                raise ConflictError(409, "port_not_listening",
                                    f"port {port} of sandbox {self.id} has no URL now (the "
                                    f"sandbox is not running)")
            return entry["url"] + "/", {}
        if via != "proxy":
            raise ValueError(f'via must be "url" or "proxy", not {via!r}')
        if ep.kind == "unix":
            raise ConfigError("the port proxy has no URL on a unix-socket sandlotd: use via=\"url\"")
        scheme = "https" if ep.kind == "https" else "http"
        host = f"[{ep.host}]" if ":" in ep.host else ep.host
        headers = {"Authorization": f"Bearer {self.client._token}"} if self.client._token else {}
        return f"{scheme}://{host}:{ep.port}{self._path(f'/ports/{int(port)}/')}", headers


def _changes_query(since, after, net, exclude_hidden):
    return {"since": int(since), "after": None if after is None else int(after),
            "net": "1" if net else None, "exclude_hidden": "1" if exclude_hidden else None}


class _ChangePages:
    """The pages of one changes view, merged (Sandbox.all_changes and
    AsyncSandbox.all_changes): each next page is asked with ``after``."""

    def __init__(self, since, net):
        self.after = int(since)
        self.net = net
        self.changes = {} if net else []
        self.truncated = False
        self.hidden = None

    def add(self, page):
        """Take one page; True when it was the last."""
        self.truncated = self.truncated or bool(page.get("truncated"))
        if "hidden" in page:
            self.hidden = (self.hidden or 0) + int(page["hidden"])
        for c in page["changes"]:
            if self.net:
                # a path changed again while the pages were read: its later entry
                self.changes.pop(c["path"], None)
                self.changes[c["path"]] = c
            else:
                self.changes.append(c)
        if not page.get("more"):
            self.cursor = page["cursor"]
            return True
        if page["cursor"] <= self.after:
            raise ProtocolError(f"sandlotd's changes cursor did not advance past {self.after}")
        self.after = page["cursor"]
        return False

    def result(self):
        out = {"cursor": self.cursor,
               "changes": list(self.changes.values()) if self.net else self.changes,
               "truncated": self.truncated}
        if self.hidden is not None:
            out["hidden"] = self.hidden
        return out


class Sandbox(_SandboxBase):
    """One sandbox of a Client.  ``id`` is its id; ``info`` the record from
    the last call that returned it (``refresh()`` fetches it again).

    Used as a context manager it is destroyed when the block ends."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.destroy(missing_ok=True)

    def _call(self, method, tail, **kw):
        kw.setdefault("context", f"sandbox {self.id}")
        return self.client._call(method, self._path(tail), **kw)

    # -- lifecycle -------------------------------------------------------
    def refresh(self):
        """Fetch the record again (state, expires_at, end_reason, ...)."""
        return self._set(self._call("GET", ""))

    def destroy(self, missing_ok=False):
        """Destroy the sandbox.  With ``missing_ok``, one that is already
        gone (ended or forgotten) is not an error."""
        try:
            self._call("DELETE", "", expect_json=False)
        except (NotFoundError, SandboxEndedError):
            if not missing_ok:
                raise

    def pause(self, memory=False):
        """Stop every process and free memory; files stay on disk.  With
        ``memory``, a vm sandbox keeps its running state too (processes,
        interpreter state, /tmp), and its resume carries on from there; an
        ns sandbox refuses it (501 not_supported: it pauses its files
        only)."""
        body = {"memory": True} if memory else {}
        return self._set(self._call("POST", "/pause", json_body=body))

    def resume(self, ttl_seconds=None, from_archive=False):
        """Bring a paused sandbox back (same id, same files; no processes or
        interpreter state).  With ``from_archive``, on a daemon that does
        not hold it, take it from the daemon's archive store (moving it to
        that daemon's node: docs/fleet-move.md)."""
        body = {} if ttl_seconds is None else {"ttl_seconds": ttl_seconds}
        if from_archive:
            body["from_archive"] = True
        return self._set(self._call("POST", "/resume", json_body=body))

    def archive(self):
        """Write the paused sandbox's files to the daemon's archive store,
        so that another node can resume it (docs/fleet-move.md).  Returns
        the archive: {"generation", "sha256", "bytes", "url", "node"}."""
        info = self._call("POST", "/archive", json_body={})
        self._set(info)
        return info["archive"]

    def keepalive(self, ttl_seconds=None):
        """Reset the idle clock; optionally a new TTL counted from now."""
        body = {} if ttl_seconds is None else {"ttl_seconds": ttl_seconds}
        return self._set(self._call("POST", "/keepalive", json_body=body))

    # -- ports -----------------------------------------------------------
    # A server listening inside on an exposed port (on 0.0.0.0 or
    # 127.0.0.1) is reachable from the host at the port's "url" (a port of
    # the host's 127.0.0.1 that sandlotd relays; None while the sandbox is
    # paused or has ended) and through the API at
    # /v1/sandboxes/ID/ports/PORT/ (HTTP and WebSocket, with the token).

    def ports(self):
        """The exposed ports: [{"port": 8000, "url": "http://127.0.0.1:N"}]."""
        return self._set_ports(self._call("GET", "/ports")["ports"])

    def expose_port(self, port):
        """Expose one more port; returns {"port", "url"}.  ConflictError if
        it already is; BadRequestError for a bad number or past 32 ports."""
        p = self._call("POST", "/ports", json_body={"port": port})
        if self.info:
            self._set_ports([x for x in self.info.get("ports", []) if x["port"] != port] + [p])
        return p

    def set_ports(self, ports):
        """Make ``ports`` the exposed ports: the others close (with every
        connection through them); those that stay keep their URL."""
        return self._set_ports(self._call("PUT", "/ports", json_body={"ports": list(ports)})["ports"])

    def remove_port(self, port):
        """Stop exposing ``port``: its listener and connections close."""
        self._call("DELETE", f"/ports/{int(port)}", expect_json=False)
        if self.info:
            self._set_ports([x for x in self.info.get("ports", []) if x["port"] != port])

    def port_url(self, port, *, via=None):
        """Where to reach exposed ``port``, and the headers to send:
        ``(url, headers)``.  ``via="url"``: the port's own URL on the host's
        127.0.0.1 (the default on a unix socket); ``via="proxy"``: the API's
        proxy, with the token (the default over TCP: it works from wherever
        the API does).  NotFoundError if the port is not exposed."""
        return self._port_entry(self.ports(), port, via)

    # -- network and packages (docs/network.md) ---------------------------
    def set_network(self, network=None, *, allow=None, deny=None):
        """Replace the network policy: a policy dict, "none" or "open", or
        ``allow=[...]`` (an allowlist) with ``deny=[...]``.  When it returns,
        connections the new policy does not allow have been closed."""
        return self._set(self._call("PUT", "/network", json_body=_policy_body(network, allow, deny)))

    def network(self):
        """The policy in force: {"mode", "allow", "deny"}."""
        return self._call("GET", "/network")

    def network_log(self, after=0):
        """The network log after seq ``after``: {"events": [...], "next",
        "dropped"}; each event a DNS query or connection, allowed or refused,
        with the reason."""
        return self._call("GET", "/network/log", query=[("after", str(int(after)))])

    def install_packages(self, pip=None, npm=None):
        """Install pip requirements and npm packages (pip --user; node_modules
        in /home/user).  Returns {"output", "from_cache", "duration_ms",
        "packages"}; raises PackageInstallError (its ``output`` is what the
        installer printed) when they cannot be installed."""
        return self._call("POST", "/packages", json_body=_packages_body(pip, npm), timeout=None)

    # -- exec ------------------------------------------------------------
    def exec(self, command=None, *, argv=None, cwd=None, env=None, stdin=None, timeout=None,
             output="text", output_limit=None):
        """Run a command to its end; returns an ExecResult.

        ``command`` is run by /bin/sh -c; or give ``argv``.  ``stdin`` (str
        or bytes) is fed, then EOF.  ``timeout`` in seconds (default the
        daemon's 300 s; 0 = none): the whole process tree is killed then and
        the result says ``timed_out``.  A non-zero exit is not an exception:
        look at ``exit_code`` (or ``status``)."""
        body, wait = self._exec_body(command, argv, cwd, env, stdin, timeout, output, output_limit)
        raw = self._call("POST", "/exec", json_body=body, timeout=wait)
        return ExecResult(raw, output)

    def exec_stream(self, command=None, *, argv=None, cwd=None, env=None, stdin=None,
                    timeout=None, output="text"):
        """Run a command and get its events as they happen: an ExecStream to
        iterate (see there); close it (or leave its ``with`` block) early to
        kill the command."""
        body, wait = self._exec_body(command, argv, cwd, env, stdin, timeout, output, None)
        conn, resp = self.client._open("POST", self._path("/exec"), json_body=body, timeout=wait,
                                       headers={"Accept": "application/x-ndjson"},
                                       context=f"sandbox {self.id}")
        return ExecStream(conn, resp, f"exec in sandbox {self.id}")

    def exec_background(self, command=None, *, argv=None, cwd=None, env=None, stdin=None,
                        timeout=None, output="text", output_limit=None):
        """Start a command and return at once with its exec id (202)."""
        body, _ = self._exec_body(command, argv, cwd, env, stdin, timeout, output, output_limit)
        body["background"] = True
        return self._call("POST", "/exec", json_body=body)["exec_id"]

    def exec_status(self, exec_id):
        """Status and output so far of an exec (ExecStatus schema: a dict)."""
        return self._call("GET", f"/execs/{_q(exec_id)}")

    def kill(self, exec_id, signal=None):
        """Send a signal (default SIGKILL; 15 or "TERM") to an exec's process group."""
        body = {} if signal is None else {"signal": signal}
        self._call("POST", f"/execs/{_q(exec_id)}/kill", json_body=body, expect_json=False)

    # -- files -----------------------------------------------------------
    def write_file(self, path, data, *, mode=None):
        """Write a file from bytes, str (UTF-8), a binary file object or an
        iterable of bytes, streamed (parents are created; the file appears
        whole or not at all).  ``mode`` e.g. 0o755.  Returns {"path", "size"}."""
        body, headers = _body_and_length(data)
        headers["Content-Type"] = "application/octet-stream"
        query = {"path": str(path)}
        if mode is not None:
            query["mode"] = format(mode, "o") if isinstance(mode, int) else str(mode)
        return self._call("PUT", "/files", query=query, body=body, headers=headers,
                          context=f"{self.id}:{path}")

    def upload(self, local_path, path, *, mode=None):
        """Write the local file ``local_path`` to ``path`` in the sandbox."""
        with open(local_path, "rb") as f:
            if mode is None:
                mode = os.fstat(f.fileno()).st_mode & 0o777
            return self.write_file(path, f, mode=mode)

    def open_file(self, path, *, max_bytes=None):
        """A binary file object streaming the file's bytes; close it (or use
        ``with``).  ``length`` is its size when the daemon sent one.
        ``max_bytes`` lowers the daemon's download limit (--max-download)
        for this read: a larger file raises PayloadTooLargeError (413
        too_large) before any byte."""
        conn, resp = self.client._open("GET", self._path("/files"),
                                       query={"path": str(path), "max_bytes": _opt_int(max_bytes)},
                                       context=f"{self.id}:{path}")
        return _Download(conn, resp, f"read {self.id}:{path}")

    def read_file(self, path, *, max_bytes=None):
        """The whole file as bytes (``max_bytes``: as for open_file)."""
        with self.open_file(path, max_bytes=max_bytes) as f:
            return f.read()

    def read_text(self, path, encoding="utf-8", *, max_bytes=None):
        return self.read_file(path, max_bytes=max_bytes).decode(encoding)

    def download(self, path, dest, *, max_bytes=None):
        """Stream the file to ``dest`` (a local path or a writable binary file
        object); returns the number of bytes.  A local file is written to a
        temporary name and renamed, so a failed download leaves nothing.
        ``max_bytes``: as for open_file."""
        with self.open_file(path, max_bytes=max_bytes) as src:
            return _save(src, dest)

    def stat(self, path):
        """{"name", "path", "type", "size", "allocated", "mode", "modified_at"};
        symlinks not followed.  ``size`` is what a read returns, ``allocated``
        the bytes the file takes on disk (far fewer for a sparse file)."""
        return self._call("GET", "/files/stat", query={"path": str(path)}, context=f"{self.id}:{path}")

    def exists(self, path):
        """Whether ``path`` exists (a symlink counts, dangling or not)."""
        try:
            self.stat(path)
            return True
        except NotFoundError:
            return False

    def list_dir(self, path="/home/user"):
        """The entries of a directory (FileInfo dicts), not recursive."""
        return self._call("GET", "/files/list", query={"path": str(path)},
                          context=f"{self.id}:{path}")["entries"]

    def mkdir(self, path):
        """Create a directory and its parents."""
        self._call("POST", "/files/mkdir", query={"path": str(path)}, expect_json=False,
                   context=f"{self.id}:{path}")

    def remove(self, path, recursive=False):
        """Delete a file, or a directory tree with ``recursive``."""
        self._call("DELETE", "/files", query={"path": str(path), "recursive": "1" if recursive else None},
                   expect_json=False, context=f"{self.id}:{path}")

    # -- tar archives ----------------------------------------------------
    def upload_archive(self, data, path="/home/user"):
        """Extract a tar archive (bytes, a file object or an iterable of
        bytes, streamed) into ``path``.  Symlinks, hard links and devices
        are skipped (listed in "skipped"); returns {"files",
        "directories", "bytes", "skipped"}."""
        body, headers = _body_and_length(data)
        headers["Content-Type"] = "application/x-tar"
        return self._call("POST", "/files/archive", query={"path": str(path)}, body=body,
                          headers=headers, context=f"{self.id}:{path}")

    def open_archive(self, path="/home/user", *, max_bytes=None):
        """A binary file object streaming the tree at ``path`` as tar.  A tree
        whose files hold more than the download limit (``max_bytes`` lowers
        the daemon's) raises PayloadTooLargeError (413 too_large) first."""
        conn, resp = self.client._open("GET", self._path("/files/archive"),
                                       query={"path": str(path), "max_bytes": _opt_int(max_bytes)},
                                       context=f"{self.id}:{path}")
        return _Download(conn, resp, f"archive {self.id}:{path}")

    def download_archive(self, path, dest, *, max_bytes=None):
        """Stream the tree at ``path`` as tar into ``dest`` (a local path or a
        writable file object); returns the number of bytes.  A local file is
        written to a temporary name and renamed when the archive is whole.
        ``max_bytes``: as for open_archive."""
        with self.open_archive(path, max_bytes=max_bytes) as src:
            return _save(src, dest)

    def snapshot(self, dest):
        """The workspace (/home/user) as tar into ``dest`` (path or file
        object; a path is written to a temporary name and renamed)."""
        conn, resp = self.client._open("GET", self._path("/snapshot"), context=f"sandbox {self.id}")
        with _Download(conn, resp, f"snapshot of {self.id}") as src:
            return _save(src, dest)

    def upload_dir(self, local_dir, path="/home/user"):
        """Copy a local directory tree (regular files and directories) into
        ``path`` as one tar upload, built in a spooled temporary file."""
        local_dir = os.fspath(local_dir)
        if not os.path.isdir(local_dir):
            raise NotADirectoryError(f"not a directory: {local_dir}")
        with tempfile.SpooledTemporaryFile(max_size=8 << 20) as spool:
            with tarfile.open(fileobj=spool, mode="w", format=tarfile.PAX_FORMAT) as tar:
                for root, dirs, files in os.walk(local_dir):
                    dirs.sort()
                    rel = os.path.relpath(root, local_dir)
                    if rel != ".":
                        tar.add(root, arcname=rel, recursive=False)
                    for name in sorted(files):
                        full = os.path.join(root, name)
                        if os.path.isfile(full) and not os.path.islink(full):
                            tar.add(full, arcname=os.path.normpath(os.path.join(rel, name)))
            spool.seek(0)
            return self.upload_archive(_chunks(spool), path)

    def download_dir(self, path, local_dir):
        """Copy the tree at ``path`` into the local directory ``local_dir``
        (created), streamed.  Only regular files and directories are written;
        entries that would land outside ``local_dir`` are refused."""
        local_dir = os.path.abspath(os.fspath(local_dir))
        os.makedirs(local_dir, exist_ok=True)
        count = 0
        with self.open_archive(path) as src:
            with tarfile.open(fileobj=src, mode="r|") as tar:
                for m in tar:
                    name = os.path.normpath(m.name)
                    target = os.path.join(local_dir, name)
                    if os.path.isabs(m.name) or name == ".." or name.startswith(".." + os.sep):
                        raise ProtocolError(f"archive of {self.id}:{path} has an unsafe entry {m.name!r}")
                    if m.isdir():
                        os.makedirs(target, exist_ok=True)
                    elif m.isfile():
                        os.makedirs(os.path.dirname(target), exist_ok=True)
                        # whole or not at all: a cut archive leaves no part of
                        # a file under its name
                        _save(tar.extractfile(m), target, mode=m.mode & 0o777)
                        count += 1
        return count

    # -- changes ---------------------------------------------------------
    def changes(self, since=0, *, after=None, net=False, exclude_hidden=False):
        """One page of the changes under /home/user after cursor ``since``:
        {"cursor", "changes": [{"path", "kind", "type", "size", "source",
        "cursor"}], "more"?, "hidden"?, "truncated"?}; pass the returned
        cursor as ``since`` next time.  ``net``: one entry per path with its
        net effect since ``since`` (a file created and deleted since is not
        there); ``exclude_hidden``: leave out paths with a component starting
        with "." or named __pycache__ (tool caches), counted in "hidden".
        ``more`` says the page was cut by the daemon's size limit: the next
        page is asked with the same arguments and ``after`` set to its
        cursor (``all_changes`` does); ``truncated`` that entries the answer
        depends on were forgotten (the daemon keeps a window of each
        sandbox's newest changes)."""
        return self._call("GET", "/changes",
                          query=_changes_query(since, after, net, exclude_hidden))

    def all_changes(self, since=0, *, net=False, exclude_hidden=False):
        """Every page after ``since`` merged: {"cursor", "changes",
        "truncated", "hidden"?} (as for ``changes``; with ``net``, one entry
        per path even when it changed again while the pages were read)."""
        pages = _ChangePages(since, net)
        while True:
            page = self.changes(since, after=pages.after, net=net, exclude_hidden=exclude_hidden)
            if pages.add(page):
                return pages.result()

    def scan_changes(self):
        """Log what changed in the workspace now (what background processes
        wrote since the last exec, file call or cell); returns the cursor."""
        return self._call("POST", "/changes/scan")["cursor"]

    # -- code contexts ---------------------------------------------------
    def run_code(self, code, *, language=None, context=None, timeout=None):
        """Run a cell in a long-lived interpreter; returns a CodeResult.

        Without ``context``, the default context of ``language`` ("python",
        "javascript" or "bash"; python if neither is given).  ``timeout`` in
        seconds interrupts the cell (status "timeout", state kept).  An error
        in the code is a result with status "error", not an exception."""
        body, wait = self._code_body(code, language, context, timeout)
        return CodeResult(self._call("POST", "/code", json_body=body, timeout=wait))

    def run_code_stream(self, code, *, language=None, context=None, timeout=None):
        """Run a cell and get its messages as they happen (a CodeStream)."""
        body, wait = self._code_body(code, language, context, timeout)
        conn, resp = self.client._open("POST", self._path("/code"), json_body=body, timeout=wait,
                                       headers={"Accept": "application/x-ndjson"},
                                       context=f"sandbox {self.id}")
        return CodeStream(conn, resp, f"code in sandbox {self.id}")

    def create_context(self, language="python"):
        """A new independent code context (its interpreter starts at once):
        {"id", "language", "busy", "alive"}."""
        return self._call("POST", "/contexts", json_body={"language": language})

    def list_contexts(self):
        return self._call("GET", "/contexts")["contexts"]

    def delete_context(self, context):
        """Stop a context's interpreter and forget its state."""
        self._call("DELETE", f"/contexts/{_q(_context_id(context))}", expect_json=False)

    def interrupt(self, context=None, language=None):
        """Interrupt the running cell of a context (its default-language one
        without ``context``).  Returns True if a cell was running."""
        body = {}
        if context is not None:
            body["context"] = _context_id(context)
        if language is not None:
            body["language"] = language
        return bool(self._call("POST", "/code/interrupt", json_body=body).get("interrupted"))


def _context_id(context):
    """A context given as its id or as the dict create_context returned."""
    return context["id"] if isinstance(context, dict) else str(context)


def _opt_int(v):
    """A whole number for a query parameter, or None to leave it out."""
    if v is None:
        return None
    if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
        raise ValueError(f"max_bytes must be a positive whole number, not {v!r}")
    return str(v)


def _save(src, dest, mode=None):
    """Copy the file object src to dest: a writable file object, or a local
    path written through a temporary file in its directory that replaces
    dest only once src ended normally (an error leaves nothing).  Returns
    the bytes copied."""
    if hasattr(dest, "write"):
        return _copy(src, dest)
    dest = os.fspath(dest)
    fd, tmp = tempfile.mkstemp(prefix=".sandlot-", dir=os.path.dirname(os.path.abspath(dest)))
    try:
        with os.fdopen(fd, "wb") as out:
            n = _copy(src, out)
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, dest)
        return n
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def _copy(src, dst):
    n = 0
    while True:
        b = src.read(_CHUNK)
        if not b:
            return n
        dst.write(b)
        n += len(b)
