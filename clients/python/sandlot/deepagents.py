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
Without it, the same three response classes are defined here as dataclasses
with the same fields, and SandlotBackend offers ``id``, ``execute``,
``upload_files`` and ``download_files``.

Per-file errors are reported, never raised: "file_not_found",
"permission_denied", "is_directory", "invalid_path", or the daemon's message
for anything else (a full disk, a sandbox that has ended).
"""
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
    return not isinstance(path, str) or not path or "\0" in path


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

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- execute ---------------------------------------------------------
    def execute(self, command, *, timeout=None):
        """Run ``command`` with /bin/sh -c in /home/user.  ``output`` is
        stdout and stderr interleaved in the order they were written, cut at
        ``max_output_bytes`` (then ``truncated``).  ``exit_code`` is the
        command's status, 124 after a timeout (the whole process tree is
        killed), 128+N when signal N killed it.  Raises a SandlotError when
        the sandbox or the daemon cannot run it at all."""
        if timeout is None:
            timeout = self.timeout
        out = []
        size = 0
        truncated = False
        with self.sandbox.exec_stream(command, timeout=timeout) as stream:
            for ev in stream:
                if ev.get("type") in ("stdout", "stderr"):
                    data = ev.get("data") or ""
                    if size + len(data) > self.max_output_bytes:
                        data = data[:max(0, self.max_output_bytes - size)]
                        truncated = True
                    size += len(data)
                    if data:
                        out.append(data)
            r = stream.result
        if r is None:
            raise SandlotError(f"exec in sandbox {self.id}: the stream ended without an exit event")
        output = "".join(out)
        notes = []
        if r.error:
            notes.append(r.error)
        if r.timed_out:
            notes.append(f"[timed out after {timeout} s: the command was killed]")
        elif r.oom_killed:
            notes.append("[killed: out of memory]")
        elif r.pids_limited:
            notes.append("[the process limit was reached]")
        if notes:
            sep = "" if not output or output.endswith("\n") else "\n"
            output += sep + "\n".join(notes)
        return ExecuteResponse(output=output, exit_code=r.status, truncated=truncated)

    # -- files -----------------------------------------------------------
    def upload_files(self, files):
        """Write each (path, bytes); one FileUploadResponse per file, in order."""
        out = []
        for item in files:
            try:
                path, content = item
            except (TypeError, ValueError):
                out.append(FileUploadResponse(path=str(item), error="invalid_path"))
                continue
            if _bad_path(path):
                out.append(FileUploadResponse(path=path, error="invalid_path"))
                continue
            try:
                self.sandbox.write_file(path, content)
                out.append(FileUploadResponse(path=path, error=None))
            except (SandlotError, TypeError) as e:
                out.append(FileUploadResponse(path=path, error=_file_error(e)))
        return out

    def download_files(self, paths):
        """Read each path; one FileDownloadResponse per path, in order."""
        out = []
        for path in paths:
            if _bad_path(path):
                out.append(FileDownloadResponse(path=path, content=None, error="invalid_path"))
                continue
            try:
                content = self.sandbox.read_file(path)
                out.append(FileDownloadResponse(path=path, content=content, error=None))
            except SandlotError as e:
                out.append(FileDownloadResponse(path=path, content=None, error=_file_error(e)))
        return out
