"""The asyncio client: ``AsyncClient`` and ``AsyncSandbox``.

    from sandlot.aio import AsyncClient

    async with AsyncClient() as client:
        async with await client.create(memory="1G") as sb:
            r = await sb.exec("echo hi")
            async with await sb.exec_stream("make test") as stream:
                async for event in stream:
                    ...

The same calls, arguments, results and errors as ``sandlot.Client`` (it
shares that client's request building, answer decoding and error mapping),
with every call that talks to the daemon a coroutine.  Nothing here runs in
a thread: the HTTP/1.1 exchange is done on asyncio streams (a unix socket,
or TCP with the bearer token, or TLS for https:// hosts), so a long exec
never blocks the event loop.  Each request opens its own connection.
"""
import asyncio
import http.client
import io
import os
import ssl
import stat as _stat

from .client import (
    _CHUNK, _UNSET, CodeResult, ExecResult, _ClientBase, _CodeEvents, _ExecEvents, _SandboxBase,
    _ChangePages, _changes_query, _context_id, _create_body, _event, _list_query, _opt_int,
    _packages_body, _policy_body, _q,
)
from .errors import (
    ConnectionLostError, NotFoundError, ProtocolError, RequestTimeoutError, SandboxEndedError,
)

__all__ = ["AsyncClient", "AsyncSandbox", "AsyncExecStream", "AsyncCodeStream", "AsyncDownload"]

_MAX_HEAD = 64 * 1024          # an answer's status line and headers
_MAX_LINE = 64 * 1024 * 1024   # one NDJSON event (output is capped well below by the daemon)


# ---------------------------------------------------------------------------
# one HTTP/1.1 exchange on asyncio streams

class _Response:
    """An answer whose head has been read: ``status``, ``headers`` (an
    http.client.HTTPMessage) and the body, read with ``read()`` /
    ``readline()`` as it arrives, de-chunked.  ``close()`` drops the
    connection (the daemon kills a streamed command whose client goes)."""

    def __init__(self, reader, writer, status, headers, method, what, timeout):
        self._r, self._w = reader, writer
        self.status, self.headers = status, headers
        self._what, self._timeout = what, timeout
        self._buf = bytearray()
        self._eof = False
        te = (headers.get("Transfer-Encoding") or "").lower()
        self._chunked = "chunked" in te
        cl = headers.get("Content-Length")
        self.length = None
        self._left = None
        if method == "HEAD" or status in (204, 304):
            self._eof = True
        elif not self._chunked and cl is not None:
            try:
                self.length = self._left = int(cl)
            except ValueError:
                raise ProtocolError(f"{what}: bad Content-Length {cl!r}") from None
            if self._left < 0:
                raise ProtocolError(f"{what}: bad Content-Length {cl!r}")
        self._chunk_left = 0

    async def _io(self, aw):
        try:
            if self._timeout is None:
                return await aw
            return await asyncio.wait_for(aw, self._timeout)
        except asyncio.TimeoutError:
            raise RequestTimeoutError(f"{self._what}: nothing from sandlotd within "
                                      f"{self._timeout}s") from None
        except asyncio.IncompleteReadError:
            raise ConnectionLostError(f"{self._what}: the answer broke off") from None
        except (OSError, asyncio.LimitOverrunError, ValueError) as e:
            raise ConnectionLostError(f"{self._what}: the answer broke off: {e}") from None

    async def _fill(self):
        """Append the next piece of the body to the buffer; False at its end."""
        if self._eof:
            return False
        if self._chunked:
            if self._chunk_left == 0:
                line = await self._io(self._r.readuntil(b"\n"))
                size = line.split(b";", 1)[0].strip()
                try:
                    self._chunk_left = int(size, 16)
                except ValueError:
                    raise ProtocolError(f"{self._what}: bad chunk size {size[:40]!r}") from None
                if self._chunk_left < 0:
                    raise ProtocolError(f"{self._what}: bad chunk size {size[:40]!r}")
                if self._chunk_left == 0:
                    while (await self._io(self._r.readuntil(b"\n"))).strip():
                        pass   # trailers
                    self._eof = True
                    return False
            data = await self._io(self._r.read(min(self._chunk_left, _CHUNK)))
            if not data:
                raise ConnectionLostError(f"{self._what}: the answer broke off mid-chunk")
            self._chunk_left -= len(data)
            if self._chunk_left == 0:
                await self._io(self._r.readexactly(2))
            self._buf += data
            return True
        want = _CHUNK if self._left is None else min(self._left, _CHUNK)
        if want == 0:
            self._eof = True
            return False
        data = await self._io(self._r.read(want))
        if not data:
            if self._left is not None:
                raise ConnectionLostError(f"{self._what}: the answer broke off "
                                          f"({self._left} bytes missing)")
            self._eof = True
            return False
        if self._left is not None:
            self._left -= len(data)
        self._buf += data
        return True

    async def read(self, n=-1):
        """Up to ``n`` bytes of the body (all of it for -1); b"" at its end."""
        if n is None or n < 0:
            while await self._fill():
                pass
            out = bytes(self._buf)
            self._buf.clear()
            return out
        while not self._buf and await self._fill():
            pass
        out = bytes(self._buf[:n])
        del self._buf[:n]
        return out

    async def readline(self):
        """The next line of the body with its newline; b"" at its end."""
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                out = bytes(self._buf[:i + 1])
                del self._buf[:i + 1]
                return out
            if len(self._buf) > _MAX_LINE:
                raise ProtocolError(f"{self._what}: a line of more than {_MAX_LINE} bytes")
            if not await self._fill():
                out = bytes(self._buf)
                self._buf.clear()
                return out

    def close(self):
        if self._w is not None:
            self._w.close()
            self._w = None


async def _body_chunks(data):
    """Upload data as (chunks, length or None): bytes, str, a binary file
    object, or a (sync or async) iterable of bytes."""
    if isinstance(data, str):
        data = data.encode("utf-8")
    if isinstance(data, (bytes, bytearray, memoryview)):
        return [bytes(data)], len(data)
    if hasattr(data, "read"):
        length = None
        try:
            st = os.fstat(data.fileno())
            if _stat.S_ISREG(st.st_mode):
                length = st.st_size - data.tell()
        except (AttributeError, OSError, io.UnsupportedOperation, ValueError):
            pass

        async def from_file():
            while True:
                b = data.read(_CHUNK)
                if isinstance(b, str):
                    b = b.encode("utf-8")
                if not b:
                    return
                yield b
        return from_file(), length
    if hasattr(data, "__aiter__"):
        return data, None
    try:
        iter(data)
    except TypeError:
        raise TypeError(f"upload data must be bytes, str, a file object or an iterable of bytes, "
                        f"not {type(data).__name__}") from None
    return data, None


async def _each(chunks):
    if hasattr(chunks, "__aiter__"):
        async for b in chunks:
            yield b
    else:
        for b in chunks:
            yield b


# ---------------------------------------------------------------------------
# streams and downloads

class _AsyncNDJSONStream:
    def __init__(self, resp, what):
        self._resp, self._what = resp, what

    async def _next_event(self):
        while True:
            if self._resp is None:
                raise StopAsyncIteration
            line = await self._resp.readline()
            if not line:
                self.close()
                raise StopAsyncIteration
            ev = _event(self._what, line)
            if ev is not None:
                return ev

    def __aiter__(self):
        return self

    def close(self):
        """Close the connection (a command still running is killed)."""
        if self._resp is not None:
            self._resp.close()
            self._resp = None

    async def aclose(self):
        self.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()


class AsyncExecStream(_ExecEvents, _AsyncNDJSONStream):
    """ExecStream for asyncio: ``async for event in stream``; ``await
    stream.wait()`` for the ExecResult; closing it early kills the command."""

    def __init__(self, resp, what):
        super().__init__(resp, what)
        self._init_events()

    async def __anext__(self):
        return self._take(await self._next_event())

    async def wait(self):
        async for _ in self:
            pass
        return self._final()


class AsyncCodeStream(_CodeEvents, _AsyncNDJSONStream):
    """CodeStream for asyncio: the cell's messages, then ``result``."""

    def __init__(self, resp, what):
        super().__init__(resp, what)
        self._init_events()

    async def __anext__(self):
        return self._take(await self._next_event())

    async def wait(self):
        async for _ in self:
            pass
        return self._final()


class AsyncDownload:
    """A streamed download: ``await read(n)``, ``async for chunk in it``;
    ``length`` is the size when the daemon sent one."""

    def __init__(self, resp):
        self._resp = resp
        self.length = resp.length

    async def read(self, n=-1):
        return await self._resp.read(n)

    def __aiter__(self):
        return self

    async def __anext__(self):
        b = await self._resp.read(_CHUNK)
        if not b:
            raise StopAsyncIteration
        return b

    def close(self):
        self._resp.close()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        self.close()


# ---------------------------------------------------------------------------
# the client

class AsyncClient(_ClientBase):
    """sandlot.Client for asyncio (same arguments; see sandlot.client)."""

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        pass

    async def _connect(self, timeout):
        ep = self._ep
        if ep.kind == "unix":
            aw = asyncio.open_unix_connection(ep.path, limit=_CHUNK * 4)
        elif ep.kind == "https":
            aw = asyncio.open_connection(ep.host, ep.port, ssl=ssl.create_default_context(),
                                         limit=_CHUNK * 4)
        else:
            aw = asyncio.open_connection(ep.host, ep.port, limit=_CHUNK * 4)
        try:
            return await (aw if timeout is None else asyncio.wait_for(aw, timeout))
        except asyncio.TimeoutError as e:
            raise self._unreachable(TimeoutError("timed out")) from e
        except OSError as e:
            raise self._unreachable(e) from None

    async def _open(self, method, path, *, query=None, json_body=None, body=None, headers=None,
                    timeout=_UNSET, context=None):
        """Send a request; returns the _Response with the status checked and
        the body unread.  Raises an APIError for an error answer."""
        if timeout is _UNSET:
            timeout = self.timeout
        url, h, body = self._prepare(method, path, query, json_body, body, headers)
        what = f"{method} {path}"
        chunks, length = (None, 0) if body is None else await _body_chunks(body)
        h.setdefault("Host", "localhost" if self._ep.kind == "unix" else self._ep.host)
        if chunks is not None and length is None:
            h["Transfer-Encoding"] = "chunked"
        elif method in ("POST", "PUT") or chunks is not None:
            h["Content-Length"] = str(length)
        head = f"{method} {url} HTTP/1.1\r\n" + "".join(f"{k}: {v}\r\n" for k, v in h.items())
        reader, writer = await self._connect(timeout)
        try:
            writer.write((head + "\r\n").encode("latin-1"))
            broke = None
            try:
                if chunks is not None:
                    async for b in _each(chunks):
                        if isinstance(b, str):
                            b = b.encode("utf-8")
                        if not b:
                            continue
                        writer.write(b"%x\r\n%s\r\n" % (len(b), b) if length is None else b)
                        await writer.drain()
                    if length is None:
                        writer.write(b"0\r\n\r\n")
                await writer.drain()
            except (BrokenPipeError, ConnectionResetError) as e:
                # The daemon refused the body before reading it all; its
                # error answer may still be there to read.
                broke = e
            try:
                resp = await self._read_head(reader, writer, method, what, timeout)
            except (ConnectionLostError, ProtocolError):
                if broke is None:
                    raise
                raise ConnectionLostError(f"{what}: the connection to sandlotd at {self.host} "
                                          f"broke: {broke}", self.host) from None
        except BaseException:
            writer.close()
            raise
        if resp.status >= 400:
            try:
                data = await resp.read(1 << 20) if resp.length is None else await resp.read()
            except (ConnectionLostError, ProtocolError, RequestTimeoutError):
                data = b""
            finally:
                resp.close()
            raise self._refusal(resp.status, data, context)
        return resp

    async def _read_head(self, reader, writer, method, what, timeout):
        async def head():
            try:
                return await reader.readuntil(b"\r\n\r\n")
            except asyncio.LimitOverrunError:
                raise ProtocolError(f"{what}: an answer head of more than {_MAX_HEAD} bytes") from None
        try:
            raw = await (head() if timeout is None else asyncio.wait_for(head(), timeout))
        except asyncio.TimeoutError:
            raise RequestTimeoutError(f"{what}: no answer from sandlotd at {self.host} within "
                                      f"{timeout}s", self.host) from None
        except asyncio.IncompleteReadError as e:
            raise ConnectionLostError(f"{what}: the connection to sandlotd at {self.host} closed "
                                      f"before an answer" + (f" ({len(e.partial)} bytes)" if e.partial else ""),
                                      self.host) from None
        except OSError as e:
            raise ConnectionLostError(f"{what}: the connection to sandlotd at {self.host} broke: "
                                      f"{e}", self.host) from None
        line, _, rest = raw.partition(b"\r\n")
        parts = line.decode("latin-1").split(" ", 2)
        if len(parts) < 2 or not parts[0].startswith("HTTP/1.") or not parts[1].isdigit():
            raise ProtocolError(f"{what}: not an HTTP answer: {line[:100]!r}")
        try:
            headers = http.client.parse_headers(io.BytesIO(rest))
        except http.client.HTTPException as e:
            raise ProtocolError(f"{what}: bad answer headers: {e}") from None
        return _Response(reader, writer, int(parts[1]), headers, method, what, timeout)

    async def _call(self, method, path, *, expect_json=True, **kw):
        resp = await self._open(method, path, **kw)
        try:
            data = await resp.read()
        finally:
            resp.close()
        return self._decode(f"{method} {path}", resp.status, data, expect_json)

    # -- daemon ----------------------------------------------------------
    async def health(self):
        return await self._call("GET", "/v1/health")

    async def metrics(self):
        resp = await self._open("GET", "/metrics")
        try:
            return (await resp.read()).decode("utf-8")
        finally:
            resp.close()

    # -- sandboxes -------------------------------------------------------
    async def create(self, **options):
        """Create a sandbox (Client.create's options); returns its AsyncSandbox."""
        # Packages are installed before the answer: no deadline for it.
        info = await self._call("POST", "/v1/sandboxes", json_body=_create_body(**options),
                                timeout=None if options.get("packages") else _UNSET)
        return AsyncSandbox(self, info["id"], info)

    async def get(self, sandbox_id):
        info = await self._call("GET", f"/v1/sandboxes/{_q(sandbox_id)}")
        return AsyncSandbox(self, info["id"], info)

    def sandbox(self, sandbox_id):
        """A handle on a sandbox by id, without a request."""
        return AsyncSandbox(self, sandbox_id)

    async def list(self, *, state=None, labels=None):
        out = await self._call("GET", "/v1/sandboxes", query=_list_query(state, labels))
        return [AsyncSandbox(self, s["id"], s) for s in out.get("sandboxes", [])]

    async def destroy(self, sandbox_id):
        await self._call("DELETE", f"/v1/sandboxes/{_q(sandbox_id)}", expect_json=False,
                         context=f"sandbox {sandbox_id}")


class AsyncSandbox(_SandboxBase):
    """sandlot.Sandbox for asyncio: ``async with`` destroys it at the end."""

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.destroy(missing_ok=True)

    async def _call(self, method, tail, **kw):
        kw.setdefault("context", f"sandbox {self.id}")
        return await self.client._call(method, self._path(tail), **kw)

    # -- lifecycle -------------------------------------------------------
    async def refresh(self):
        return self._set(await self._call("GET", ""))

    async def destroy(self, missing_ok=False):
        try:
            await self._call("DELETE", "", expect_json=False)
        except (NotFoundError, SandboxEndedError):
            if not missing_ok:
                raise

    async def pause(self, memory=False):
        body = {"memory": True} if memory else {}
        return self._set(await self._call("POST", "/pause", json_body=body))

    async def resume(self, ttl_seconds=None, from_archive=False):
        body = {} if ttl_seconds is None else {"ttl_seconds": ttl_seconds}
        if from_archive:
            body["from_archive"] = True
        return self._set(await self._call("POST", "/resume", json_body=body))

    async def archive(self):
        info = await self._call("POST", "/archive", json_body={})
        self._set(info)
        return info["archive"]

    async def keepalive(self, ttl_seconds=None):
        body = {} if ttl_seconds is None else {"ttl_seconds": ttl_seconds}
        return self._set(await self._call("POST", "/keepalive", json_body=body))

    # -- ports -----------------------------------------------------------
    async def ports(self):
        return self._set_ports((await self._call("GET", "/ports"))["ports"])

    async def expose_port(self, port):
        p = await self._call("POST", "/ports", json_body={"port": port})
        if self.info:
            self._set_ports([x for x in self.info.get("ports", []) if x["port"] != port] + [p])
        return p

    async def set_ports(self, ports):
        out = await self._call("PUT", "/ports", json_body={"ports": list(ports)})
        return self._set_ports(out["ports"])

    async def remove_port(self, port):
        await self._call("DELETE", f"/ports/{int(port)}", expect_json=False)
        if self.info:
            self._set_ports([x for x in self.info.get("ports", []) if x["port"] != port])

    async def port_url(self, port, *, via=None):
        return self._port_entry(await self.ports(), port, via)

    # -- exec ------------------------------------------------------------
    async def exec(self, command=None, *, argv=None, cwd=None, env=None, stdin=None, timeout=None,
                   output="text", output_limit=None):
        """Sandbox.exec: run a command to its end; returns an ExecResult."""
        body, wait = self._exec_body(command, argv, cwd, env, stdin, timeout, output, output_limit)
        return ExecResult(await self._call("POST", "/exec", json_body=body, timeout=wait), output)

    async def exec_stream(self, command=None, *, argv=None, cwd=None, env=None, stdin=None,
                          timeout=None, output="text"):
        """Sandbox.exec_stream: an AsyncExecStream of the command's events."""
        body, wait = self._exec_body(command, argv, cwd, env, stdin, timeout, output, None)
        resp = await self.client._open("POST", self._path("/exec"), json_body=body, timeout=wait,
                                       headers={"Accept": "application/x-ndjson"},
                                       context=f"sandbox {self.id}")
        return AsyncExecStream(resp, f"exec in sandbox {self.id}")

    async def exec_background(self, command=None, *, argv=None, cwd=None, env=None, stdin=None,
                              timeout=None, output="text", output_limit=None):
        body, _ = self._exec_body(command, argv, cwd, env, stdin, timeout, output, output_limit)
        body["background"] = True
        return (await self._call("POST", "/exec", json_body=body))["exec_id"]

    async def exec_status(self, exec_id):
        return await self._call("GET", f"/execs/{_q(exec_id)}")

    async def kill(self, exec_id, signal=None):
        body = {} if signal is None else {"signal": signal}
        await self._call("POST", f"/execs/{_q(exec_id)}/kill", json_body=body, expect_json=False)

    # -- files -----------------------------------------------------------
    async def write_file(self, path, data, *, mode=None):
        """Sandbox.write_file (data: bytes, str, a file object, or a sync or
        async iterable of bytes, streamed)."""
        query = {"path": str(path)}
        if mode is not None:
            query["mode"] = format(mode, "o") if isinstance(mode, int) else str(mode)
        return await self._call("PUT", "/files", query=query, body=data,
                                headers={"Content-Type": "application/octet-stream"},
                                context=f"{self.id}:{path}")

    async def open_file(self, path, *, max_bytes=None):
        """An AsyncDownload streaming the file's bytes (``max_bytes``: as for
        Sandbox.open_file)."""
        resp = await self.client._open("GET", self._path("/files"),
                                       query={"path": str(path), "max_bytes": _opt_int(max_bytes)},
                                       context=f"{self.id}:{path}")
        return AsyncDownload(resp)

    async def read_file(self, path, *, max_bytes=None):
        async with await self.open_file(path, max_bytes=max_bytes) as f:
            return await f.read()

    async def read_text(self, path, encoding="utf-8", *, max_bytes=None):
        return (await self.read_file(path, max_bytes=max_bytes)).decode(encoding)

    async def stat(self, path):
        return await self._call("GET", "/files/stat", query={"path": str(path)},
                                context=f"{self.id}:{path}")

    async def exists(self, path):
        try:
            await self.stat(path)
            return True
        except NotFoundError:
            return False

    async def list_dir(self, path="/home/user"):
        out = await self._call("GET", "/files/list", query={"path": str(path)},
                               context=f"{self.id}:{path}")
        return out["entries"]

    async def mkdir(self, path):
        await self._call("POST", "/files/mkdir", query={"path": str(path)}, expect_json=False,
                         context=f"{self.id}:{path}")

    async def remove(self, path, recursive=False):
        await self._call("DELETE", "/files",
                         query={"path": str(path), "recursive": "1" if recursive else None},
                         expect_json=False, context=f"{self.id}:{path}")

    async def upload_archive(self, data, path="/home/user"):
        return await self._call("POST", "/files/archive", query={"path": str(path)}, body=data,
                                headers={"Content-Type": "application/x-tar"},
                                context=f"{self.id}:{path}")

    async def open_archive(self, path="/home/user", *, max_bytes=None):
        resp = await self.client._open("GET", self._path("/files/archive"),
                                       query={"path": str(path), "max_bytes": _opt_int(max_bytes)},
                                       context=f"{self.id}:{path}")
        return AsyncDownload(resp)

    # -- changes ---------------------------------------------------------
    async def changes(self, since=0, *, after=None, net=False, exclude_hidden=False):
        return await self._call("GET", "/changes",
                                query=_changes_query(since, after, net, exclude_hidden))

    async def all_changes(self, since=0, *, net=False, exclude_hidden=False):
        pages = _ChangePages(since, net)
        while True:
            page = await self.changes(since, after=pages.after, net=net,
                                      exclude_hidden=exclude_hidden)
            if pages.add(page):
                return pages.result()

    async def scan_changes(self):
        return (await self._call("POST", "/changes/scan"))["cursor"]

    # -- code contexts ---------------------------------------------------
    async def run_code(self, code, *, language=None, context=None, timeout=None):
        body, wait = self._code_body(code, language, context, timeout)
        return CodeResult(await self._call("POST", "/code", json_body=body, timeout=wait))

    async def run_code_stream(self, code, *, language=None, context=None, timeout=None):
        body, wait = self._code_body(code, language, context, timeout)
        resp = await self.client._open("POST", self._path("/code"), json_body=body, timeout=wait,
                                       headers={"Accept": "application/x-ndjson"},
                                       context=f"sandbox {self.id}")
        return AsyncCodeStream(resp, f"code in sandbox {self.id}")

    # -- network and packages (docs/network.md; as Sandbox's) -------------
    async def set_network(self, network=None, *, allow=None, deny=None):
        return self._set(await self._call("PUT", "/network",
                                          json_body=_policy_body(network, allow, deny)))

    async def network(self):
        return await self._call("GET", "/network")

    async def network_log(self, after=0):
        return await self._call("GET", "/network/log", query=[("after", str(int(after)))])

    async def install_packages(self, pip=None, npm=None):
        return await self._call("POST", "/packages", json_body=_packages_body(pip, npm),
                                timeout=None)

    async def create_context(self, language="python"):
        return await self._call("POST", "/contexts", json_body={"language": language})

    async def list_contexts(self):
        return (await self._call("GET", "/contexts"))["contexts"]

    async def delete_context(self, context):
        await self._call("DELETE", f"/contexts/{_q(_context_id(context))}", expect_json=False)

    async def interrupt(self, context=None, language=None):
        body = {}
        if context is not None:
            body["context"] = _context_id(context)
        if language is not None:
            body["language"] = language
        return bool((await self._call("POST", "/code/interrupt", json_body=body)).get("interrupted"))
