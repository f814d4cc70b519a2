"""sandlot interpreter host: a stateful Python context, or (argument "bash") a bash shell.

Runs inside a sandbox as an ordinary process, started as

    python3 -c "<this file's text>"          # Python cells
    python3 -c "<this file's text>" bash     # bash cells (this program drives an interactive bash)

and speaks the line-based JSON protocol of spec/interpreter.md over its stdin/stdout.  Only the
standard library is used.  Keep this file under 100 KiB: it travels as one argv string, and Linux
caps a single argument at 128 KiB.
"""

import ast
import base64
import builtins
import codecs
import io
import json
import linecache
import os
import platform
import select
import signal
import sys
import threading
import time
import traceback
import types

PROTOCOL = 1
MAX_LINE = 1 << 20          # bytes in one protocol line, newline included
READ_CHUNK = 128 * 1024     # output bytes per stdout/stderr message: <= 6x that once JSON-escaped
PART_CHARS = 400_000        # characters of an oversized message's JSON text per "part" line
VALUE_MAX = 1 << 20         # characters kept of a result's "value"
MAX_ID = 1024               # characters in a request id
F_SETPIPE_SZ = 1031
CO_COROUTINE = 0x80
HOST_FILE = (lambda: 0).__code__.co_filename   # frames of this program ("<string>" under -c)


class _State:
    def __init__(self):
        self.mode = "python"
        self.pid = os.getpid()
        self.main_ident = threading.get_ident()
        self.proto = None
        self.pumps = []
        self.out_id = None          # id that captured output is attributed to
        self.count = 0              # execution counter
        self.running = False        # a cell (user code) is executing
        self.critical = 0           # main thread inside a host section that must not be interrupted
        self.pending_int = False    # SIGINT arrived inside a critical section
        self.timed_out = False
        self.interrupted = False    # bash: an interrupt was forwarded during this cell
        self.int_next = 0.0         # bash: when to forward it again if the cell still runs
        self.int_gap = 0.0
        self.watchdog = None
        self.ns = None
        self.loop = None
        self.last_value = None      # what we last bound to "_"
        self.stdout = None
        self.stderr = None
        self.bash = None
        self.answered = True


S = _State()


# ---------------------------------------------------------------------------------------------
# Protocol output

def _dumps(msg, ascii_only=False):
    return json.dumps(msg, ensure_ascii=ascii_only, separators=(",", ":"), allow_nan=False)


class _Proto:
    """The private protocol stream (a dup of the original stdout).  One lock: lines never mix."""

    def __init__(self, fd):
        self.fd = fd
        self.lock = threading.Lock()

    def _write(self, data):
        view = memoryview(data)
        while view:
            try:
                n = os.write(self.fd, view)
            except OSError:
                os._exit(0)             # the reader is gone: nobody to serve
            view = view[n:]

    def send(self, msg):
        if os.getpid() != S.pid:
            return                      # a forked child of user code never speaks the protocol
        line = _dumps(msg).encode("utf-8", "replace")
        with self.lock:
            if len(line) < MAX_LINE:
                self._write(line + b"\n")
                return
            text = _dumps(msg, ascii_only=True)
            for i in range(0, len(text), PART_CHARS):
                part = {"id": msg.get("id"), "type": "part", "data": text[i:i + PART_CHARS],
                        "more": i + PART_CHARS < len(text)}
                self._write(_dumps(part).encode("ascii") + b"\n")


class _Critical:
    """Main-thread section during which SIGINT is deferred (a protocol line is never cut)."""

    def __enter__(self):
        if threading.get_ident() == S.main_ident:
            S.critical += 1

    def __exit__(self, *exc):
        if threading.get_ident() != S.main_ident:
            return False
        S.critical -= 1
        if S.critical == 0 and S.pending_int and S.running and S.mode == "python":
            S.pending_int = False
            raise KeyboardInterrupt
        return False


def send(msg):
    with _Critical():
        S.proto.send(msg)


# ---------------------------------------------------------------------------------------------
# Output capture: fd 1 and fd 2 are pipes read by two long-lived threads

class _Pump:
    def __init__(self, name, target_fd):
        self.name = name
        r, w = os.pipe()
        try:
            import fcntl
            fcntl.fcntl(w, F_SETPIPE_SZ, 1 << 20)
        except OSError:
            pass
        os.dup2(w, target_fd)           # inheritable: children write here too
        os.close(w)
        os.set_blocking(r, False)
        self.fd = r
        self.lock = threading.Lock()
        self.decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self.thread = threading.Thread(target=self._run, name="sandlot-" + name, daemon=True)

    def _run(self):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        poller = select.poll()
        poller.register(self.fd, select.POLLIN)
        while True:
            poller.poll()
            with self.lock:
                try:
                    data = os.read(self.fd, READ_CHUNK)
                except BlockingIOError:
                    continue
                if not data:
                    return              # every writer closed fd 1/2: nothing more can come
                self._frame(data)

    def _frame(self, data, final=False):
        text = self.decoder.decode(data, final)
        if text and S.out_id is not None:
            S.proto.send({"id": S.out_id, "type": self.name, "data": text})

    def drain(self, final):
        """Frame everything already written to the pipe (called by the main thread)."""
        with self.lock:
            while True:
                try:
                    data = os.read(self.fd, READ_CHUNK)
                except BlockingIOError:
                    break
                if not data:
                    break
                self._frame(data)
            if final:
                self._frame(b"", True)


def drain(final=False):
    for stream in (sys.stdout, sys.stderr, S.stdout, S.stderr):
        try:
            stream.flush()
        except Exception:
            pass
    if os.getpid() != S.pid:
        return                          # a forked child: the pumps (and their locks) are not its
    for pump in S.pumps:
        pump.drain(final)


# ---------------------------------------------------------------------------------------------
# Interrupts and timeouts

def _on_sigint(signum, frame):
    if S.mode == "bash":
        _bash_interrupt()
        return
    if not S.running:
        return                          # idle: an interrupt has nothing to stop
    if S.critical:
        S.pending_int = True
        return
    raise KeyboardInterrupt


class _Watchdog:
    """One long-lived thread; arm() per cell with a timeout (no thread per cell)."""

    def __init__(self):
        self.cv = threading.Condition()
        self.deadline = None
        self.seq = None
        threading.Thread(target=self._run, name="sandlot-watchdog", daemon=True).start()

    def arm(self, seq, ms):
        with self.cv:
            self.seq, self.deadline = seq, time.monotonic() + ms / 1000.0
            self.cv.notify()

    def disarm(self):
        with self.cv:
            self.seq = self.deadline = None

    def _run(self):
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        with self.cv:
            while True:
                if self.deadline is None:
                    self.cv.wait()
                    continue
                left = self.deadline - time.monotonic()
                if left > 0:
                    self.cv.wait(left)
                    continue
                if S.running and S.count == self.seq:
                    S.timed_out = True
                    signal.pthread_kill(S.main_ident, signal.SIGINT)
                self.deadline += 1.0    # insist every second until the cell ends


# ---------------------------------------------------------------------------------------------
# Rich output

_REPRS = (("_repr_html_", "text/html"), ("_repr_markdown_", "text/markdown"),
          ("_repr_svg_", "image/svg+xml"), ("_repr_png_", "image/png"),
          ("_repr_jpeg_", "image/jpeg"), ("_repr_latex_", "text/latex"),
          ("_repr_json_", "application/json"), ("_repr_javascript_", "application/javascript"),
          ("_repr_pdf_", "application/pdf"))
_BINARY = {"image/png", "image/jpeg", "image/gif", "application/pdf"}


def _method(obj, name):
    if isinstance(obj, type):
        return None                     # a class, not an instance: its _repr_*_ are unbound
    try:
        m = getattr(obj, name, None)
    except Exception:
        return None
    return m if callable(m) else None


def _norm(mime, value):
    if isinstance(value, tuple) and value:
        value = value[0]                # (data, metadata)
    if value is None:
        return None
    if mime == "application/json":
        if isinstance(value, (str, bytes)):
            try:
                value = json.loads(value)
            except ValueError:
                return None
        try:
            _dumps(value)
        except (TypeError, ValueError):
            return None
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        if mime in _BINARY or not mime.startswith("text/"):
            return base64.b64encode(bytes(value)).decode("ascii")
        return bytes(value).decode("utf-8", "replace")
    return value if isinstance(value, str) else str(value)


def _png_size(b64):
    try:
        head = base64.b64decode(b64[:44])
        if head[:8] == b"\x89PNG\r\n\x1a\n" and head[12:16] == b"IHDR":
            return {"width": int.from_bytes(head[16:20], "big"),
                    "height": int.from_bytes(head[20:24], "big")}
    except Exception:
        pass
    return None


def _figure_png(fig):
    buf = io.BytesIO()
    fig.savefig(buf, format="png", bbox_inches="tight")
    return base64.b64encode(buf.getvalue()).decode("ascii")


def _is_figure(obj):
    mod = sys.modules.get("matplotlib.figure")
    return mod is not None and isinstance(obj, mod.Figure)


def _rich_bundle(obj):
    """The mime types an object offers besides text/plain (IPython's _repr_*_ conventions)."""
    out = {}
    m = _method(obj, "_repr_mimebundle_")
    if m is not None:
        try:
            r = m(include=None, exclude=None)
            if isinstance(r, tuple):
                r = r[0]
            if isinstance(r, dict):
                for k, v in r.items():
                    v = _norm(k, v) if isinstance(k, str) else None
                    if v is not None:
                        out[k] = v
        except Exception:
            pass
    for name, mime in _REPRS:
        if mime in out:
            continue
        m = _method(obj, name)
        if m is None:
            continue
        try:
            v = _norm(mime, m())
        except Exception:
            continue
        if v is not None:
            out[mime] = v
    if "image/png" not in out and _is_figure(obj):
        out["image/png"] = _figure_png(obj)
    out.pop("text/plain", None)
    return out


def _metadata(bundle):
    if "image/png" in bundle and isinstance(bundle["image/png"], str):
        size = _png_size(bundle["image/png"])
        if size:
            return {"image/png": size}
    return {}


def _emit_display(bundle, metadata=None):
    with _Critical():
        drain()
        S.proto.send({"id": S.out_id, "type": "display", "data": bundle,
                      "metadata": metadata if metadata is not None else _metadata(bundle)})


def display(*objs, raw=False, metadata=None, **_ignored):
    """Show objects as rich output (IPython-style): text/plain plus every _repr_*_ they offer.

    display(obj) -- the object's mime bundle;  display({"text/html": "<b>x</b>"}, raw=True) --
    a ready-made bundle.  Matplotlib figures give image/png.
    """
    for obj in objs:
        if raw:
            if not isinstance(obj, dict):
                raise TypeError("display(raw=True) takes a dict of mime type -> data")
            bundle = {}
            for k, v in obj.items():
                v = _norm(str(k), v)
                if v is not None:
                    bundle[str(k)] = v
        else:
            bundle = {"text/plain": repr(obj)}
            bundle.update(_rich_bundle(obj))
        md = dict(_metadata(bundle))
        if isinstance(metadata, dict):
            md.update(metadata)
        _emit_display(bundle, md)


def _flush_figures():
    """Every open pyplot figure becomes an image/png display output, then all are closed."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return
    try:
        from matplotlib._pylab_helpers import Gcf
        figs = [m.canvas.figure for m in Gcf.get_all_fig_managers()]
    except Exception:
        return
    try:
        for fig in figs:
            try:
                png = _figure_png(fig)
            except Exception:
                traceback.print_exc()
                continue
            bundle = {"image/png": png, "text/plain": repr(fig)}
            _emit_display(bundle, _metadata(bundle))
    finally:
        try:
            plt.close("all")
        except Exception:
            pass


def _patch_pyplot(plt):
    shown = plt.show

    def show(*args, **kwargs):
        """Show the open figures now (sandlot: as image/png display outputs), then close them."""
        _flush_figures()

    show.__wrapped__ = shown
    plt.show = show


class _PyplotHook:
    """Meta-path finder that patches matplotlib.pyplot.show right after pyplot is imported."""

    busy = False

    def find_spec(self, name, path=None, target=None):
        if name != "matplotlib.pyplot" or self.busy:
            return None
        import importlib.util
        self.busy = True
        try:
            spec = importlib.util.find_spec(name)
        except Exception:
            return None
        finally:
            self.busy = False
        loader = getattr(spec, "loader", None)
        if loader is None or not hasattr(loader, "exec_module"):
            return spec
        original = loader.exec_module

        def exec_module(module):
            original(module)
            try:
                _patch_pyplot(module)
            except Exception:
                pass

        loader.exec_module = exec_module
        return spec


# ---------------------------------------------------------------------------------------------
# Python cells

def _shell(cmd):
    import subprocess
    subprocess.run(cmd, shell=True)


_MAGIC_NOOP = {"matplotlib", "config", "load_ext", "reload_ext", "autoreload", "precision"}


def _magics(code):
    """IPython-style lines that are not Python: "!cmd" runs a shell command, "%pip ...",
    "%cd DIR"; "%matplotlib ..." and a few others do nothing.  Used only if the cell does not
    parse as Python."""
    out, changed = [], False
    for line in code.split("\n"):
        body = line.lstrip()
        indent = line[:len(line) - len(body)]
        if body.startswith("!"):
            out.append("%s__sandlot_shell__(%r)" % (indent, body[1:]))
            changed = True
        elif body.startswith("%") and not body.startswith("%%"):
            name, _, arg = body[1:].partition(" ")
            if name == "pip":
                out.append("%s__sandlot_shell__(%r)" % (indent, "python3 -m pip " + arg))
            elif name == "cd":
                out.append("%s__import__('os').chdir(__import__('os').path.expanduser(%r))"
                           % (indent, arg.strip() or "~"))
            elif name in _MAGIC_NOOP:
                out.append(indent + "pass")
            else:
                out.append(line)
                continue
            changed = True
        else:
            out.append(line)
    return "\n".join(out) if changed else None


def _parse(code, filename):
    try:
        return ast.parse(code, filename, "exec"), code
    except SyntaxError:
        alt = _magics(code)
        if alt is None:
            raise
        try:
            return ast.parse(alt, filename, "exec"), alt
        except SyntaxError:
            pass
        raise


def _suppressed(code, node):
    """A trailing ';' after the last expression hides its value (as in IPython)."""
    try:
        line = code.split("\n")[node.end_lineno - 1].encode("utf-8")
        return line[node.end_col_offset:].decode("utf-8", "replace").lstrip().startswith(";")
    except Exception:
        return False


def _run_code(code_obj):
    if code_obj.co_flags & CO_COROUTINE:
        import asyncio
        if S.loop is None:
            S.loop = asyncio.new_event_loop()
        task = S.loop.create_task(eval(code_obj, S.ns))
        try:
            return S.loop.run_until_complete(task)
        except BaseException:
            if not task.done():
                task.cancel()
            raise
    return eval(code_obj, S.ns)


def _execute(code, filename):
    """Run a cell; return (value, has_value) like a notebook: the last expression's value."""
    tree, source = _parse(code, filename)
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    last = None
    if tree.body and isinstance(tree.body[-1], ast.Expr) and not _suppressed(source, tree.body[-1]):
        last = ast.Expression(tree.body.pop().value)
    flags = ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
    if tree.body:
        _run_code(compile(tree, filename, "exec", flags=flags, dont_inherit=True))
    if last is None:
        return None, False
    return _run_code(compile(last, filename, "eval", flags=flags, dont_inherit=True)), True


def _format_value(obj):
    text = repr(obj)
    truncated = len(text) > VALUE_MAX
    if truncated:
        text = text[:VALUE_MAX]
    rich = _rich_bundle(obj)
    if "image/png" in rich and _is_figure(obj):
        plt = sys.modules.get("matplotlib.pyplot")
        try:
            if plt is not None and obj.number in plt.get_fignums():
                del rich["image/png"]   # an open pyplot figure is shown at the end of the cell
        except Exception:
            pass
    data = None
    if rich:
        data = {"text/plain": text}
        data.update(rich)
    return text, data, truncated


def _error(e, filename):
    if isinstance(e, SyntaxError) and e.filename == filename:
        lines = traceback.format_exception_only(type(e), e)     # the cell did not compile
    else:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == HOST_FILE:
            tb = tb.tb_next             # the host's own frames are not the user's business
        if isinstance(e, SyntaxError) and tb is None:
            lines = traceback.format_exception_only(type(e), e)
        else:
            lines = traceback.format_exception(type(e), e, tb)
    text = "".join(lines).rstrip("\n")
    try:
        value = str(e)
    except Exception:
        value = "<exception str() failed>"
    return {"name": type(e).__name__, "value": value, "traceback": text.split("\n")}


def run_python(rid, code, timeout_ms):
    S.count += 1
    seq = S.count
    filename = "<cell-%d>" % seq
    S.out_id = rid
    S.timed_out = S.pending_int = False
    status, value, data, err, truncated = "ok", None, None, None, False
    t0 = time.perf_counter()
    if timeout_ms:
        if S.watchdog is None:
            S.watchdog = _Watchdog()
        S.watchdog.arm(seq, timeout_ms)
    S.running = True
    try:
        try:
            obj, has_value = _execute(code, filename)
            if has_value and obj is not None:
                value, data, truncated = _format_value(obj)
                if "_" not in S.ns or S.ns["_"] is S.last_value:
                    S.ns["_"] = S.last_value = obj
        finally:
            if os.getpid() == S.pid:
                try:
                    _flush_figures()
                except Exception:
                    pass
    except BaseException as e:          # KeyboardInterrupt and SystemExit too: the context lives
        S.running = False
        if os.getpid() != S.pid:
            os._exit(1)
        err = _error(e, filename)
        if isinstance(e, KeyboardInterrupt):
            if S.timed_out:
                status = "timeout"
                err.update(name="TimeoutError",
                           value="the cell exceeded its timeout of %s ms" % timeout_ms)
            else:
                status = "interrupted"
                err["value"] = err["value"] or "interrupted"
        else:
            status = "error"
    S.running = False
    if os.getpid() != S.pid:
        os._exit(0)                     # a forked child fell through to the host loop
    if S.watchdog is not None:
        S.watchdog.disarm()
    duration = (time.perf_counter() - t0) * 1000.0
    msg = {"id": rid, "type": "result", "status": status, "value": value, "data": data,
           "error": err, "duration_ms": round(duration, 3), "execution_count": seq}
    if truncated:
        msg["value_truncated"] = True
    _answer(msg)


def _answer(msg):
    with _Critical():
        drain(final=True)
        S.proto.send(msg)
        S.answered = True


def setup_python():
    os.environ.setdefault("MPLBACKEND", "Agg")
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    main = types.ModuleType("__main__")
    main.__dict__.update(__builtins__=builtins, display=display, __sandlot_shell__=_shell)
    sys.modules["__main__"] = main
    S.ns = main.__dict__
    sys.argv = [""]
    sys.meta_path.insert(0, _PyplotHook())


# ---------------------------------------------------------------------------------------------
# bash cells: an interactive bash fed one line per cell

_BASH_PRELUDE = r"""__sl_sfd=%d; PS1=; PS2=; PS0=; PROMPT_COMMAND=; HISTFILE=; unset MAILCHECK
set +o history +H
__sl_seq=0
__sl_begin() { __sl_seq=$1; printf 'B %%s\0' "$1" >&$__sl_sfd; }
__sl_end() { local __sl_s=$?; printf 'E %%s %%s %%s\0' "$__sl_seq" "$__sl_s" "$PWD" >&$__sl_sfd; return $__sl_s; }
PROMPT_COMMAND=__sl_end
printf 'R %%s\0' "$BASH_VERSION" >&$__sl_sfd
"""

_BASH_QUOTE = {i: "\\x%02x" % i for i in range(32)}
_BASH_QUOTE.update({ord("\\"): "\\\\", ord("'"): "\\'", 10: "\\n", 9: "\\t", 0x7f: "\\x7f"})


class _Bash:
    def __init__(self):
        self.proc = None
        self.version = None
        self.began = 0
        self.buf = b""
        self.eof = False

    def start(self):
        import subprocess
        r_cmd, w_cmd = os.pipe()
        r_st, w_st = os.pipe()
        preexec = None
        try:
            import ctypes
            prctl = ctypes.CDLL(None, use_errno=True).prctl

            def preexec():
                prctl(1, int(signal.SIGKILL), 0, 0, 0)    # PR_SET_PDEATHSIG: die with the driver
        except Exception:
            pass
        try:
            self.proc = subprocess.Popen(
                ["bash", "--norc", "--noprofile", "--noediting", "-i"], stdin=r_cmd,
                pass_fds=(w_st,), start_new_session=True, preexec_fn=preexec)
        finally:
            os.close(r_cmd)
            os.close(w_st)
        self.cmd = w_cmd
        self.status = r_st
        self.child_status_fd = w_st     # pass_fds keeps the number: the prelude writes to it
        self.buf = b""
        self.began = 0
        self._write((_BASH_PRELUDE % w_st).encode())
        deadline = time.monotonic() + 30
        while True:
            rec = self._record(max(0.0, deadline - time.monotonic()))
            if rec is None:
                raise RuntimeError("bash did not start")
            if rec[0] == "R":
                self.version = rec[1]
                return

    def _write(self, data):
        view = memoryview(data)
        while view:
            try:
                view = view[os.write(self.cmd, view):]
            except BrokenPipeError:
                return False
        return True

    def _record(self, timeout=None):
        """Next status record from bash as a list of fields, or None on EOF/timeout."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\0" not in self.buf:
            wait = None if deadline is None else max(0.0, deadline - time.monotonic())
            ready, _, _ = select.select([self.status], [], [], wait)
            if not ready:
                return None
            data = os.read(self.status, 4096)
            if not data:
                self.eof = True
                return None
            self.buf += data
        rec, self.buf = self.buf.split(b"\0", 1)
        return rec.decode("utf-8", "surrogateescape").split(" ", 3)

    def stop(self):
        if self.proc is None:
            return
        for fd in (self.cmd, self.status):
            try:
                os.close(fd)
            except OSError:
                pass
        try:
            self.proc.wait(1)
        except Exception:
            try:
                os.killpg(self.proc.pid, signal.SIGKILL)
            except OSError:
                pass
            self.proc.wait()
        self.proc = None


def _bash_interrupt():
    b = S.bash
    if not S.running or b is None or b.proc is None:
        return
    if b.began != S.count:
        S.pending_int = True            # bash is still reading the cell line: wait for "B"
        return
    S.interrupted = True
    S.int_gap = 0.25
    _bash_signal(b)


def _bash_signal(b):
    # SIGINT the whole group.  One that reaches bash between two commands of the cell (after a
    # builtin, before the next fork), or while the cell ignores it, does not stop what follows:
    # run_bash forwards it again while the cell runs on (after 0.25 s, 0.5 s, 1 s, then every 2 s).
    S.int_next = time.monotonic() + S.int_gap
    S.int_gap = min(2.0, S.int_gap * 2)
    try:
        os.killpg(b.proc.pid, signal.SIGINT)
    except OSError:
        pass


def run_bash(rid, code, timeout_ms):
    b = S.bash
    S.count += 1
    seq = S.count
    S.out_id = rid
    S.timed_out = S.pending_int = S.interrupted = False
    t0 = time.perf_counter()
    status, err, exit_code, cwd, restarted = "ok", None, None, None, False
    if "\0" in code:
        status = "error"
        err = {"name": "ValueError", "value": "a bash cell cannot contain a NUL character",
               "traceback": []}
    else:
        line = "__sl_begin %d; eval $'%s' </dev/null %d>&-\n" % (
            seq, code.translate(_BASH_QUOTE), b.child_status_fd)
        if timeout_ms:
            if S.watchdog is None:
                S.watchdog = _Watchdog()
            S.watchdog.arm(seq, timeout_ms)
        S.running = True
        alive = b._write(line.encode("utf-8", "replace"))
        while alive:
            rec = b._record(0.25)
            if rec is None:
                if b.eof:
                    alive = False
                elif S.interrupted and b.began == seq and time.monotonic() >= S.int_next:
                    _bash_signal(b)
            elif rec[0] == "B" and rec[1] == str(seq):
                b.began = seq
                if S.pending_int:
                    S.pending_int = False
                    _bash_interrupt()
            elif rec[0] == "E" and rec[1] == str(seq):
                exit_code = int(rec[2])
                cwd = rec[3] if len(rec) > 3 else None
                break
        S.running = False
        if alive and S.interrupted:
            # A SIGINT forwarded during the cell could still reach bash while it reads the next
            # cell's line, and cut it.  One more prompt cycle (an empty line) absorbs it.
            alive = b._write(b"\n")
            while alive:
                rec = b._record(2.0)
                if rec is None or rec[0] == "E":
                    break
        if S.watchdog is not None:
            S.watchdog.disarm()
        if not alive:
            rc = b.proc.wait()
            b.stop()
            status = "error"
            how = "status %d" % rc if rc >= 0 else "signal %d" % -rc
            err = {"name": "ShellExited",
                   "value": "bash exited (%s); a new shell was started, its state is lost" % how,
                   "traceback": []}
            exit_code = rc
            _start_bash()
            restarted = True
        elif S.timed_out:
            status = "timeout"
            err = {"name": "TimeoutError",
                   "value": "the cell exceeded its timeout of %s ms" % timeout_ms, "traceback": []}
        elif S.interrupted and exit_code != 0:
            status = "interrupted"
            err = {"name": "Interrupted", "value": "interrupted (SIGINT)", "traceback": []}
        elif exit_code != 0:
            status = "error"
            err = {"name": "ExitStatus", "value": str(exit_code), "traceback": []}
    msg = {"id": rid, "type": "result", "status": status, "value": None, "data": None,
           "error": err, "duration_ms": round((time.perf_counter() - t0) * 1000.0, 3),
           "execution_count": seq, "exit_code": exit_code, "cwd": cwd}
    if restarted:
        msg["restarted"] = True
    _answer(msg)


def _start_bash():
    drain(final=True)                   # what the old shell wrote still belongs to the cell
    owner, S.out_id = S.out_id, None
    try:
        b = _Bash()
        b.start()
        S.bash = b
        drain(final=True)               # startup noise ("no job control", first prompt): dropped
    finally:
        S.out_id = owner


# ---------------------------------------------------------------------------------------------
# Main loop

def _protocol_error(rid, text, name="ProtocolError", status="error"):
    _answer({"id": rid, "type": "result", "status": status, "value": None, "data": None,
             "error": {"name": name, "value": text, "traceback": []},
             "duration_ms": 0.0, "execution_count": S.count})


def handle(line):
    try:
        req = json.loads(line)
    except ValueError as e:
        _protocol_error(None, "request is not JSON: %s" % e)
        return
    if not isinstance(req, dict):
        _protocol_error(None, "request must be a JSON object")
        return
    rid = req.get("id")
    if not isinstance(rid, str) or not rid or len(rid) > MAX_ID:
        _protocol_error(None, "request id must be a non-empty string of at most %d characters"
                        % MAX_ID)
        return
    kind = req.get("kind", "execute")
    if kind != "execute":
        _protocol_error(rid, "unknown kind %r" % (kind,))
        return
    code = req.get("code")
    timeout = req.get("timeout_ms")
    if not isinstance(code, str):
        _protocol_error(rid, '"code" must be a string')
        return
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or timeout <= 0):
        _protocol_error(rid, '"timeout_ms" must be a positive number')
        return
    if S.mode == "bash":
        run_bash(rid, code, timeout)
    else:
        run_python(rid, code, timeout)


def main():
    S.mode = "bash" if "bash" in sys.argv[1:] else "python"
    proto_in = os.dup(0)                # private, close-on-exec copies of the protocol channel
    proto_out = os.dup(1)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)                    # user code reads /dev/null, never the requests
    os.close(null)
    S.proto = _Proto(proto_out)
    S.pumps = [_Pump("stdout", 1), _Pump("stderr", 2)]
    for pump in S.pumps:
        pump.thread.start()
    S.stdout = io.TextIOWrapper(io.FileIO(1, "w", closefd=False), encoding="utf-8",
                                errors="backslashreplace", line_buffering=True)
    S.stderr = io.TextIOWrapper(io.FileIO(2, "w", closefd=False), encoding="utf-8",
                                errors="backslashreplace", line_buffering=True)
    sys.stdout = sys.__stdout__ = S.stdout
    sys.stderr = sys.__stderr__ = S.stderr
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.FileIO(0, "r", closefd=False),
                                                 encoding="utf-8", errors="replace")
    signal.signal(signal.SIGINT, _on_sigint)
    if S.mode == "bash":
        try:
            _start_bash()
        except Exception as e:
            send({"id": None, "type": "fatal", "message": "cannot start bash: %s" % e})
            os._exit(1)
        ready = {"language": "bash", "version": S.bash.version}
    else:
        setup_python()
        ready = {"language": "python", "version": platform.python_version()}
    send(dict({"id": None, "type": "ready"}, pid=os.getpid(), protocol=PROTOCOL, **ready))
    reader = os.fdopen(proto_in, "rb", buffering=1 << 16)
    while True:
        try:
            line = reader.readline()
        except KeyboardInterrupt:
            continue
        if not line:
            break
        if not line.strip():
            continue
        S.answered = False
        try:
            handle(line)
        except BaseException as e:      # a SIGINT in host code, or a host bug: answer, serve on
            S.running = False
            if os.getpid() != S.pid:
                os._exit(0)
            if not S.answered:
                if isinstance(e, KeyboardInterrupt):
                    _protocol_error(S.out_id, "interrupted", "KeyboardInterrupt", "interrupted")
                else:
                    _protocol_error(S.out_id, "host error: %r" % (e,), "HostError")
    if S.bash is not None:
        drain(final=True)
        S.out_id = None                 # bash's own "exit" on end of input is not cell output
        S.bash.stop()
    try:
        drain(final=True)
    except Exception:
        pass
    os._exit(0)


main()
