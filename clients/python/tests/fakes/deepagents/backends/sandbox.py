"""Test stand-in for deepagents.backends.sandbox.BaseSandbox: subclasses
implement id, execute, upload_files and download_files; the file tools are
derived from them (here only read, ls and write, in the same way: read and ls
run commands through execute, write goes through upload_files)."""
import abc
import shlex

from .protocol import SandboxBackendProtocol


class BaseSandbox(SandboxBackendProtocol, abc.ABC):
    @property
    @abc.abstractmethod
    def id(self):
        ...

    @abc.abstractmethod
    def execute(self, command, *, timeout=None):
        ...

    @abc.abstractmethod
    def upload_files(self, files):
        ...

    @abc.abstractmethod
    def download_files(self, paths):
        ...

    def read(self, file_path, offset=0, limit=2000):
        r = self.execute(f"tail -n +{offset + 1} {shlex.quote(file_path)} | head -n {limit}")
        return r.output if r.exit_code == 0 else f"Error: {r.output.strip()}"

    def ls(self, path):
        r = self.execute(f"ls -1 {shlex.quote(path)}")
        return sorted(r.output.split()) if r.exit_code == 0 else []

    def write(self, file_path, content):
        res = self.upload_files([(file_path, content.encode("utf-8"))])[0]
        return res.error
