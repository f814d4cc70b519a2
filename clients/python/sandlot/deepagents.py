"""A Deep Agents sandbox backend on sandlot: ``SandlotBackend``.

    from sandlot import Client
    from sandlot.deepagents import SandlotBackend

    backend = SandlotBackend(Client().create())
    backend.execute("python3 -c 'print(6 * 7)'")      # ExecuteResponse(output='42\\n', exit_code=0, ...)
    backend.upload_files([("/home/user/a.txt", b"hi")])
    backend.download_files(["/home/user/a.txt"])

With ``deepagents`` installed, SandlotBackend subclasses
``deepagents.backends.sandbox.BaseSandbox`` and returns its
``ExecuteResponse`` / ``FileUploadResponse`` / ``FileDownloadResponse``, so
``create_deep_agent(backend=SandlotBackend(...))`` gets ``execute`` plus the
file tools BaseSandbox derives from it (ls, read, write, edit, grep, glob).
The async members (``aexecute``, ``aupload_files``, ``adownload_files``, and
BaseSandbox's async tools built on them) run on sandlot.aio: no thread, no
blocked event loop.
Without it, the same three response classes are defined here as dataclasses
with the same fields, and SandlotBackend offers ``id``, ``execute``,
``upload_files`` and ``download_files``.

Per-file errors are reported, never raised: "file_not_found",
"permission_denied", "is_directory", "invalid_path", or the daemon's message
for anything else (a full disk, a sandbox that has ended).
"""
import posixpath
import re
import shlex
from dataclasses import dataclass
from typing import Optional

from ._owned import OwnedSandbox
from .errors import (
    APIError, AuthError, BadRequestError, NotFoundError, SandlotError,
)

try:  # the framework is optional
    from deepagents.backends.protocol import (
        ExecuteResponse, FileDownloadResponse, FileUploadResponse,
    )
    from deepagents.backends.protocol import GlobResult, WriteResult
    from deepagents.backends.sandbox import BaseSandbox as _Base
    HAVE_DEEPAGENTS = True
except ImportError:
    HAVE_DEEPAGENTS = False
    _Base = object

    @dataclass
    class ExecuteResponse:
        """Stands in for deepagents.backends.protocol.ExecuteResponse."""
        output: str
        exit_code: Optional[int] = None
        truncated: bool = False

    @dataclass
    class FileUploadResponse:
        """Stands in for deepagents.backends.protocol.FileUploadResponse."""
        path: str
        error: Optional[str] = None

    @dataclass
    class FileDownloadResponse:
        """Stands in for deepagents.backends.protocol.FileDownloadResponse."""
        path: str
        content: Optional[bytes] = None
        error: Optional[str] = None

__all__ = ["SandlotBackend", "ExecuteResponse", "FileUploadResponse", "FileDownloadResponse",
           "HAVE_DEEPAGENTS"]


def _file_error(e):
    """The FileOperationError literal for a refusal, or its message."""
    if isinstance(e, NotFoundError) and e.code == "not_found":
        # An unknown sandbox is a 404 too, but its message names the sandbox.
        if "no sandbox " in e.message or "invalid sandbox id" in e.message:
            return e.message
        return "file_not_found"
    if isinstance(e, AuthError):
        return "permission_denied"
    if isinstance(e, BadRequestError):
        if "Is a directory" in e.message:
            return "is_directory"
        return "invalid_path"
    return e.message if isinstance(e, APIError) else str(e)


def _bad_path(path):
    """Deep Agents' paths are absolute (a relative one is "invalid_path",
    as its standard tests ask)."""
    return not isinstance(path, str) or not path.startswith("/") or "\0" in path


def glob_regex(pattern):
    """A glob (``*``, ``?``, ``**``, ``[...]``, ``[!...]``, ``{a,b}``) as a
    compiled regular expression over a relative path."""
    out, i, braces = [], 0, 0
    while i < len(pattern):
        ch = pattern[i]
        if ch == "*":
            if pattern.startswith("**/", i):
                out.append("(?:.*/)?")
                i += 3
                continue
            if pattern.startswith("**", i):
                out.append(".*")
                i += 2
                continue
            out.append("[^/]*")
        elif ch == "?":
            out.append("[^/]")
        elif ch == "[":
            end = pattern.find("]", i + 2 if pattern.startswith("[!", i) else i + 1)
            if end < 0:
                raise ValueError("unclosed [")
            body = pattern[i + 1:end]
            if body.startswith("!"):
                body = "^" + body[1:]
            out.append("[" + body.replace("\\", "\\\\") + "]")
            i = end + 1
            continue
        elif ch == "{":
            braces += 1
            out.append("(?:")
        elif ch == "}" and braces:
            braces -= 1
            out.append(")")
        elif ch == "," and braces:
            out.append("|")
        else:
            out.append(re.escape(ch))
        i += 1
    if braces:
        raise ValueError("unclosed {")
    return re.compile("".join(out) + r"\Z")


class SandlotBackend(_Base):
    """Deep Agents backend over one sandlot sandbox.

    ``SandlotBackend(sandbox=None, *, client=None, sandbox_options=None,
    timeout=300, max_output_bytes=1 MiB)``: ``sandbox`` is a sandlot.Sandbox
    (or an id); without one, a sandbox is created on first use with
    ``client`` and ``sandbox_options`` and destroyed by ``close()``.
    ``timeout`` is the default for ``execute`` in seconds (0 = none)."""

    def __init__(self, sandbox=None, *, client=None, sandbox_options=None, timeout=300,
                 max_output_bytes=1 << 20):
        self._holder = OwnedSandbox(sandbox, client, sandbox_options)
        self.timeout = timeout
        self.max_output_bytes = max_output_bytes

    @property
    def sandbox(self):
        return self._holder.sandbox

    @property
    def id(self):
        return self._holder.sandbox.id

    def close(self):
        """Destroy the sandbox if this backend created it."""
        self._holder.close()

    async def aclose(self):
        """close() without blocking the event loop."""
        await self._holder.aclose()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- execute ---------------------------------------------------------
    def _fold(self, timeout):
        return _Output(self.max_output_bytes, timeout, self.id)

    def execute(self, command, *, timeout=None):
        """Run ``command`` with /bin/sh -c in /home/user.  ``output`` is
        stdout and stderr interleaved in the order they were written, cut at
        ``max_output_bytes`` (then ``truncated``).  ``exit_code`` is the
        command's status, 124 after a timeout (the whole process tree is
        killed), 128+N when signal N killed it.  ``timeout`` in seconds
        (default the backend's; 0 = none).  Raises a SandlotError when the
        sandbox or the daemon cannot run it at all."""
        timeout = self.timeout if timeout is None else timeout
        fold = self._fold(timeout)
        with self.sandbox.exec_stream(command, timeout=timeout) as stream:
            for ev in stream:
                fold.add(ev)
            return fold.response(stream.result)

    async def aexecute(self, command, *, timeout=None):
        """execute() on asyncio (sandlot.aio): the event loop runs on while
        the command does."""
        timeout = self.timeout if timeout is None else timeout
        fold = self._fold(timeout)
        sb = await self._holder.asandbox()
        async with await sb.exec_stream(command, timeout=timeout) as stream:
            async for ev in stream:
                fold.add(ev)
            return fold.response(stream.result)

    # -- the tools Deep Agents' standard tests define more strictly than
    # BaseSandbox does (only with deepagents installed) ------------------
    if HAVE_DEEPAGENTS:
        def _exists_message(self, path):
            return (f"Cannot write to {path} because it already exists. Read and then make an "
                    f"edit, or write to a new path.")

        def write(self, file_path, content):
            """Create a new file (parents made); an existing one is an
            error, as the standard tests ask: edit it instead."""
            if _bad_path(file_path):
                return WriteResult(error=f"Invalid path '{file_path}': paths must be absolute")
            try:
                self.sandbox.stat(file_path)
                return WriteResult(error=self._exists_message(file_path))
            except NotFoundError:
                pass
            except SandlotError as e:
                return WriteResult(error=f"Failed to write file '{file_path}': {_file_error(e)}")
            [r] = self.upload_files([(file_path, content.encode("utf-8"))])
            if r.error:
                return WriteResult(error=f"Failed to write file '{file_path}': {r.error}")
            return WriteResult(path=file_path)

        async def awrite(self, file_path, content):
            if _bad_path(file_path):
                return WriteResult(error=f"Invalid path '{file_path}': paths must be absolute")
            sb = await self._holder.asandbox()
            try:
                await sb.stat(file_path)
                return WriteResult(error=self._exists_message(file_path))
            except NotFoundError:
                pass
            except SandlotError as e:
                return WriteResult(error=f"Failed to write file '{file_path}': {_file_error(e)}")
            [r] = await self.aupload_files([(file_path, content.encode("utf-8"))])
            if r.error:
                return WriteResult(error=f"Failed to write file '{file_path}': {r.error}")
            return WriteResult(path=file_path)

        def _glob_argv(self, pattern, path):
            try:
                rx = glob_regex(pattern[2:] if pattern.startswith("./") else pattern)
            except ValueError as e:
                return None, None, GlobResult(error=f"glob: bad pattern {pattern!r}: {e}")
            base = posixpath.normpath(path or "/home/user")
            if not base.startswith("/"):
                return None, None, GlobResult(error=f"glob: the path must be absolute: {path!r}")
            cmd = (f"find {shlex.quote(base)} -mindepth 1 -printf '%y\\t%s\\t%T@\\t%p\\0' "
                   f"2>/dev/null; true")
            return cmd, (base, rx), None

        @staticmethod
        def _glob_matches(output, base, rx):
            matches = []
            for rec in output.split("\0"):
                parts = rec.split("\t", 3)
                if len(parts) != 4:
                    continue
                kind, size, mtime, full = parts
                rel = posixpath.relpath(full, base)
                if rx.match(rel):
                    matches.append({"path": rel, "is_dir": kind == "d", "size": int(size or 0),
                                    "modified_at": mtime})
            matches.sort(key=lambda m: m["path"])
            return GlobResult(matches=matches)

        def glob(self, pattern, path=None):
            """Files and directories under ``path`` whose path relative to
            it matches ``pattern``, relative to it (as the standard tests
            ask; BaseSandbox's own glob answers absolute paths)."""
            cmd, ctx, err = self._glob_argv(pattern, path)
            if err:
                return err
            return self._glob_matches(self.execute(cmd, timeout=60).output, *ctx)

        async def aglob(self, pattern, path=None):
            cmd, ctx, err = self._glob_argv(pattern, path)
            if err:
                return err
            return self._glob_matches((await self.aexecute(cmd, timeout=60)).output, *ctx)

    # -- files -----------------------------------------------------------
    def upload_files(self, files):
        """Write each (path, bytes); one FileUploadResponse per file, in order."""
        out = []
        for path, content, error in _uploads(files):
            if error is None:
                try:
                    self.sandbox.write_file(path, content)
                except (SandlotError, TypeError) as e:
                    error = _file_error(e)
            out.append(FileUploadResponse(path=path, error=error))
        return out

    async def aupload_files(self, files):
        out = []
        sb = None
        for path, content, error in _uploads(files):
            if error is None:
                try:
                    sb = sb or await self._holder.asandbox()
                    await sb.write_file(path, content)
                except (SandlotError, TypeError) as e:
                    error = _file_error(e)
            out.append(FileUploadResponse(path=path, error=error))
        return out

    def download_files(self, paths):
        """Read each path; one FileDownloadResponse per path, in order."""
        out = []
        for path in paths:
            content, error = None, ("invalid_path" if _bad_path(path) else None)
            if error is None:
                try:
                    content = self.sandbox.read_file(path)
                except SandlotError as e:
                    error = _file_error(e)
            out.append(FileDownloadResponse(path=path, content=content, error=error))
        return out

    async def adownload_files(self, paths):
        out = []
        sb = None
        for path in paths:
            content, error = None, ("invalid_path" if _bad_path(path) else None)
            if error is None:
                try:
                    sb = sb or await self._holder.asandbox()
                    content = await sb.read_file(path)
                except SandlotError as e:
                    error = _file_error(e)
            out.append(FileDownloadResponse(path=path, content=content, error=error))
        return out


def _uploads(files):
    """(path, content, error) for each item of an upload_files list."""
    for item in files:
        try:
            path, content = item
        except (TypeError, ValueError):
            yield str(item), None, "invalid_path"
            continue
        yield path, content, ("invalid_path" if _bad_path(path) else None)


class _Output:
    """An exec stream's output folded into one ExecuteResponse."""

    def __init__(self, limit, timeout, sandbox_id):
        self.limit, self.timeout, self.sandbox_id = limit, timeout, sandbox_id
        self.parts, self.size, self.truncated = [], 0, False

    def add(self, ev):
        if ev.get("type") not in ("stdout", "stderr"):
            return
        data = ev.get("data") or ""
        if self.size + len(data) > self.limit:
            data = data[:max(0, self.limit - self.size)]
            self.truncated = True
        self.size += len(data)
        if data:
            self.parts.append(data)

    def response(self, r):
        if r is None:
            raise SandlotError(f"exec in sandbox {self.sandbox_id}: the stream ended without an "
                               f"exit event")
        output = "".join(self.parts)
        notes = []
        if r.error:
            notes.append(r.error)
        if r.timed_out:
            notes.append(f"[timed out after {self.timeout} s: the command was killed]")
        elif r.oom_killed:
            notes.append("[killed: out of memory]")
        elif r.pids_limited:
            notes.append("[the process limit was reached]")
        if notes:
            sep = "" if not output or output.endswith("\n") else "\n"
            output += sep + "\n".join(notes)
        return ExecuteResponse(output=output, exit_code=r.status, truncated=self.truncated)
