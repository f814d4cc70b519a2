"""E2B's in-sandbox API (commands, files, watchDir, the code interpreter)
with the real `e2b` and `e2b-code-interpreter` PyPI SDKs (pinned in
tests/e2b/requirements.txt) against sandlotd: Sandbox.create() over TCP
with the daemon's token (conftest.py), then envd's Connect RPC, /files and
the interpreter's /execute under the same /e2b prefix."""
import base64

import pytest
from e2b import (CommandExitException, ConnectionConfig, FileType, InvalidArgumentException,
                 NotFoundException, TimeoutException)
from e2b_code_interpreter import Sandbox
from packaging.version import Version

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def sbx(e2bd):
    s = Sandbox.create(timeout=600, **e2bd.opts())
    yield s
    s.kill()


def test_commands_foreground_streams_cwd_envs(sbx):
    out, err = [], []
    sbx.files.make_dir("/tmp/py-work")
    r = sbx.commands.run('echo "$WHO in $(pwd)"; echo warn >&2', cwd="/tmp/py-work", envs={"WHO": "py"},
                         on_stdout=out.append, on_stderr=err.append)
    assert (r.exit_code, r.stdout, r.stderr) == (0, "py in /tmp/py-work\n", "warn\n")
    assert "".join(out) == "py in /tmp/py-work\n" and "".join(err) == "warn\n"


def test_commands_nonzero_exit_raises(sbx):
    with pytest.raises(CommandExitException) as e:
        sbx.commands.run("echo so-far; exit 9")
    assert e.value.exit_code == 9 and e.value.stdout == "so-far\n"


def test_commands_background_list_kill_stdin(sbx):
    h = sbx.commands.run("sleep 600", background=True)
    assert h.pid in [p.pid for p in sbx.commands.list()]
    assert sbx.commands.kill(h.pid) is True
    with pytest.raises(CommandExitException):
        h.wait()
    assert sbx.commands.kill(h.pid) is False
    c = sbx.commands.run("cat", background=True, stdin=True)
    sbx.commands.send_stdin(c.pid, "via stdin\n")
    sbx.commands.close_stdin(c.pid)
    assert c.wait().stdout == "via stdin\n"
    with pytest.raises(NotFoundException):
        sbx.commands.send_stdin(4194000, "x")


def test_commands_timeout(sbx):
    with pytest.raises(TimeoutException):
        sbx.commands.run("sleep 600", timeout=1.5)


def test_files_roundtrip_many_list_and_errors(sbx):
    info = sbx.files.write("py/one.txt", "first")
    assert info.path == "/home/user/py/one.txt"
    assert sbx.files.read("py/one.txt") == "first"
    sbx.files.write_files([{"path": "py/two.bin", "data": b"\x00\xff"}, {"path": "py/sub/three.txt", "data": "3"}])
    assert bytes(sbx.files.read("py/two.bin", format="bytes")) == b"\x00\xff"
    assert b"".join(sbx.files.read("py/sub/three.txt", format="stream")) == b"3"
    names = sorted(e.path for e in sbx.files.list("py", depth=2))
    assert names == ["/home/user/py/one.txt", "/home/user/py/sub", "/home/user/py/sub/three.txt",
                     "/home/user/py/two.bin"]
    assert sbx.files.get_info("py/sub").type == FileType.DIR
    assert sbx.files.exists("py/one.txt") and not sbx.files.exists("py/none")
    assert sbx.files.make_dir("py/newdir") is True and sbx.files.make_dir("py/newdir") is False
    assert sbx.files.rename("py/one.txt", "py/moved.txt").path == "/home/user/py/moved.txt"
    sbx.files.remove("py/moved.txt")
    assert not sbx.files.exists("py/moved.txt")
    with pytest.raises(NotFoundException):
        sbx.files.read("py/absent.txt")
    with pytest.raises(InvalidArgumentException):
        sbx.files.read("/home/user/py")


def test_watch_dir(sbx):
    sbx.files.make_dir("pywatch")
    h = sbx.files.watch_dir("pywatch", recursive=True)
    sbx.files.write("pywatch/f.txt", "1")
    sbx.commands.run("mkdir pywatch/d && echo 2 > pywatch/d/g.txt && echo 3 > py-outside.txt")
    seen = {(e.type.name, e.name) for e in h.get_new_events()}
    assert {("CREATE", "f.txt"), ("CREATE", "d"), ("CREATE", "d/g.txt")} <= seen, seen
    assert not any("outside" in name for _, name in seen)
    sbx.files.remove("pywatch/f.txt")
    assert ("REMOVE", "f.txt") in {(e.type.name, e.name) for e in h.get_new_events()}
    h.stop()


def test_run_code_state_chart_error(sbx):
    sbx.run_code("acc = 1")
    lines = []
    e = sbx.run_code("print('hi'); acc + 1", on_stdout=lambda m: lines.append(m.line))
    assert e.text == "2" and e.logs.stdout == ["hi\n"] and lines == ["hi\n"]
    chart = sbx.run_code("import matplotlib.pyplot as plt\nplt.bar([1, 2], [3, 4])\nplt.show()")
    pngs = [r.png for r in chart.results if r.png]
    assert len(pngs) == 1 and base64.b64decode(pngs[0]).startswith(PNG_MAGIC)
    err = sbx.run_code("1 / 0")
    assert err.error.name == "ZeroDivisionError" and "ZeroDivisionError" in err.error.traceback
    ctx = sbx.create_code_context(language="python")
    sbx.run_code("only_here = 5", context=ctx)
    assert sbx.run_code("only_here", context=ctx).text == "5"
    assert any(c.id == ctx.id for c in sbx.list_code_contexts())
    sbx.remove_code_context(ctx)
    assert sbx.run_code("21 * 2", language="js").text == "42"


def test_unknown_sandbox(e2bd):
    headers = {"E2b-Sandbox-Id": "sb-doesnotexistdoesnotexist0", "E2b-Sandbox-Port": "49983",
               "X-Access-Token": e2bd.token}
    opts = e2bd.opts()
    cc = ConnectionConfig(api_key=opts["api_key"], api_url=opts["api_url"], sandbox_url=opts["sandbox_url"],
                          extra_sandbox_headers=headers)
    ghost = Sandbox(sandbox_id="sb-doesnotexistdoesnotexist0", envd_version=Version("0.5.7"),
                    envd_access_token=e2bd.token, sandbox_domain=None, connection_config=cc)
    with pytest.raises(Exception) as e:
        ghost.files.read("a.txt")
    assert "not found" in str(e.value).lower() or isinstance(e.value, TimeoutException)
