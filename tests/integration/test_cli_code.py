"""`sandlot code` (cells in a sandbox's code contexts, through sandlotd) and
`sandlot run --lang` (one-shot code, no daemon), driven as a user would."""
import signal
import struct
import time

import pytest

from conftest import kill_group, read_line_with_deadline
from test_cli_client import Cli  # noqa: F401  (the client CLI runner)
from test_cli_client import cli, sb  # noqa: F401  (fixtures)

# Behaviour both backends must have: each test runs with isolation ns and vm
# (conftest.py, `backends`).
pytestmark = pytest.mark.backends


# ---- sandlot code -----------------------------------------------------------

def test_state_persists_between_calls_and_the_value_is_printed(cli, sb):
    r = cli("code", sb, "-c", "import math\nx = 40")
    assert r.rc == 0 and r.stdout == "", r
    r = cli("code", sb, "-c", "x += 2\nprint('x is', x)\nmath.sqrt(x * x)")
    assert r.rc == 0, r
    assert r.stdout == "x is 42\n42.0\n", r


def test_code_from_a_file_and_from_stdin(cli, sb, tmp_path):
    f = tmp_path / "cell.py"
    f.write_text("y = [i * i for i in range(5)]\nsum(y)\n")
    r = cli("code", sb, str(f))
    assert r.rc == 0 and r.stdout == "30\n", r
    r = cli("code", sb, input=b"len(y)\n")
    assert r.rc == 0 and r.stdout == "5\n", r
    r = cli("code", sb, "-", input=b"y[-1]\n")
    assert r.rc == 0 and r.stdout == "16\n", r


def test_javascript_and_bash_contexts(cli, sb):
    assert cli("code", "--lang", "js", sb, "-c", "let n = 41").rc == 0
    r = cli("code", "-l", "javascript", sb, "-c", "n + 1")
    assert r.rc == 0 and r.stdout == "42\n", r
    r = cli("code", "--lang", "bash", sb, "-c", "cd /tmp; V=7")
    assert r.rc == 0, r
    r = cli("code", "--lang", "bash", sb, "-c", "echo $V $(pwd); (exit 3)")
    assert r.rc == 3 and r.stdout == "7 /tmp\n", r


def test_an_exception_prints_a_traceback_and_the_context_lives(cli, sb):
    cli("code", sb, "-c", "keep = 'me'")
    r = cli("code", sb, "-c", "def f():\n    return 1 / 0\nf()")
    assert r.rc == 1, r
    assert "ZeroDivisionError" in r.stderr and "line 2" in r.stderr, r
    r = cli("code", sb, "-c", "keep")
    assert r.rc == 0 and r.stdout == "'me'\n", r


def test_timeout_interrupts_and_keeps_state(cli, sb):
    cli("code", sb, "-c", "before = 1")
    t0 = time.monotonic()
    r = cli("code", "--timeout", "500ms", sb, "-c", "while True: pass")
    assert r.rc == 124, r
    assert time.monotonic() - t0 < 10
    r = cli("code", sb, "-c", "before + 1")
    assert r.rc == 0 and r.stdout == "2\n", r


def test_ctrl_c_interrupts_the_cell_and_keeps_state(cli, sb):
    cli("code", sb, "-c", "kept = 'yes'")
    p = cli.popen(["code", sb, "-c", "import time\nprint('looping', flush=True)\n"
                   "while True: time.sleep(0.05)"])
    try:
        assert read_line_with_deadline(p.stdout, time.monotonic() + 20) == b"looping\n"
        p.send_signal(signal.SIGINT)
        out, err = p.communicate(timeout=20)
        assert p.returncode == 128 + signal.SIGINT, (out, err)
        assert b"KeyboardInterrupt" in err, err
    finally:
        kill_group(p)
    r = cli("code", sb, "-c", "kept")
    assert r.rc == 0 and r.stdout == "'yes'\n", r


def test_matplotlib_figure_saved_as_png(cli, sb, tmp_path):
    probe = cli("exec", sb, "--", "python3", "-c", "import matplotlib")
    if probe.rc != 0:
        pytest.skip("the image's python3 has no matplotlib (python3-matplotlib not installed)")
    out = tmp_path / "plots"
    r = cli("code", "--save-images", str(out), sb, "-c",
            "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()")
    assert r.rc == 0, r
    pngs = sorted(out.glob("*.png"))
    assert len(pngs) == 1, (r, list(out.iterdir()))
    data = pngs[0].read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    w, h = struct.unpack(">II", data[16:24])
    assert w > 50 and h > 50
    assert str(pngs[0]) in r.stderr
    # Without --save-images the figure is announced, not lost silently.
    r = cli("code", sb, "-c", "plt.plot([1, 2]); plt.show()")
    assert r.rc == 0 and "image/png" in r.stderr and "--save-images" in r.stderr, r


def test_interpreter_death_is_reported(cli, sb):
    cli("code", sb, "-c", "z = 1")
    r = cli("code", sb, "-c", "import os; os._exit(7)")
    assert r.rc == 1, r
    assert "status 7" in r.stderr and "state was lost" in r.stderr, r
    r = cli("code", sb, "-c", "'z' in globals()")
    assert r.rc == 0 and r.stdout == "False\n", r


def test_json_output(cli, sb):
    r = cli("code", "--json", sb, "-c", "print('hi')\n6 * 7")
    assert r.rc == 0, r
    j = r.json()
    assert j["status"] == "ok" and j["stdout"] == "hi\n" and j["value"] == "42", j


def test_bad_arguments(cli, sb, tmp_path):
    cases = [
        (["code"], "no sandbox given"),
        (["code", "--lang", "ruby", sb, "-c", "1"], "unknown language"),
        (["code", sb, "-c", "1", "extra.py"], "not both"),
        (["code", sb, str(tmp_path / "missing.py")], "missing.py"),
        (["code", sb, str(tmp_path)], "is a directory"),
        (["code", "--timeout", "soon", sb, "-c", "1"], "--timeout"),
        (["code", "--bogus", sb], "unknown option --bogus"),
    ]
    for args, msg in cases:
        r = cli(*args)
        assert r.rc == 2 and msg in r.stderr, (args, r)
    r = cli("code", "sb-doesnotexist", "-c", "1")
    assert r.rc == 125 and "sb-doesnotexist" in r.stderr, r
    r = cli("code", "--context", "nope", sb, "-c", "1")
    assert r.rc == 125 and "nope" in r.stderr, r


def test_unreachable_daemon(tmp_path):
    c = Cli(f"unix:{tmp_path}/none.sock")
    r = c("code", "sb-x", "-c", "1")
    assert r.rc == 125 and "cannot reach sandlotd" in r.stderr, r


# ---- sandlot run --lang -----------------------------------------------------

@pytest.mark.backends(check=True)
def test_run_lang_inline(sandlot):
    r = sandlot.run(["--lang", "python", "-c", "import sys; print(sys.argv[1:], 6 * 7)", "a", "b"])
    assert r.rc == 0 and r.stdout == "['a', 'b'] 42\n", r
    r = sandlot.run(["--lang", "js", "-c", "console.log(process.argv.slice(1).join(','))", "x"])
    assert r.rc == 0 and r.stdout == "x\n", r
    r = sandlot.run(["--lang", "bash", "-c", "echo $1; exit 4", "arg"])
    assert r.rc == 4 and r.stdout == "arg\n", r


def test_run_lang_file_is_uploaded_and_run(sandlot, tmp_path):
    f = tmp_path / "analyse.py"
    f.write_text("import os, sys\nprint(os.getcwd(), os.path.abspath(sys.argv[0]), sys.argv[1:])\n")
    r = sandlot.run(["--lang", "python", str(f), "--verbose"])
    assert r.rc == 0 and r.stdout == "/home/user /home/user/analyse.py ['--verbose']\n", r


def test_run_lang_stdin_and_large_code(sandlot):
    r = sandlot.run(["--lang", "python", "-"], input=b"print('from stdin')\n")
    assert r.rc == 0 and r.stdout == "from stdin\n", r
    # Past what one argument may hold (128 KiB): the code goes in as a file.
    big = ("x = 1\n" * 40000 + "print('big', x)\n").encode()
    r = sandlot.run(["--lang", "python"], input=big)
    assert r.rc == 0 and r.stdout == "big 1\n", r


def test_run_lang_errors(sandlot, tmp_path):
    for args, msg in [
        (["--lang", "cobol", "-c", "1"], "unknown --lang"),
        (["-c", "print(1)"], "-c needs --lang"),
        (["--lang", "python", str(tmp_path / "nope.py")], "nope.py"),
        (["--lang", "python", str(tmp_path)], "not a readable file"),
        (["--lang", "python", "-i", "-"], "-i cannot be used"),
    ]:
        r = sandlot.run(args, input=b"")
        assert r.rc == 2 and msg in r.stderr, (args, r)
    r = sandlot.run(["--lang", "python", "-c", "raise SystemExit(9)"])
    assert r.rc == 9, r
