"""Test stand-in for deepagents.backends.protocol: the response dataclasses
and the sandbox protocol, with the real ones' fields."""
import abc
from dataclasses import dataclass
from typing import Optional


@dataclass
class ExecuteResponse:
    output: str
    exit_code: Optional[int] = None
    truncated: bool = False


@dataclass
class FileUploadResponse:
    path: str
    error: Optional[str] = None


@dataclass
class FileDownloadResponse:
    path: str
    content: Optional[bytes] = None
    error: Optional[str] = None


class BackendProtocol(abc.ABC):  # noqa: B024
    def upload_files(self, files):
        raise NotImplementedError

    def download_files(self, paths):
        raise NotImplementedError


class SandboxBackendProtocol(BackendProtocol):
    @property
    def id(self):
        raise NotImplementedError

    def execute(self, command, *, timeout=None):
        raise NotImplementedError
