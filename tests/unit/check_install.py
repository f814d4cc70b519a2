#!/usr/bin/env python3
"""`meson install` into a DESTDIR, and a program built against what it put there.

Usage: check_install.py BUILD_DIR SOURCE_DIR PREFIX LIBDIR INCLUDEDIR BINDIR VERSION

Checks that the install has sandlot.h (and no private header), the shared
libsandlot with its soname and links, and sandlot.pc; then builds
examples/hello.c with `pkg-config --cflags --libs sandlot` against the
installed *shared* library (nothing of libsandlot linked in statically),
runs it as root with the installed sandlot-init, and checks what it
printed: a sandbox created, a command run, its output read, the sandbox
destroyed.  Without root the run is skipped, saying so.  TAP output.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

cases = []


def case(name, ok, why=""):
    cases.append((name, bool(ok), why))
    return bool(ok)


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, **kw)


def dynamic_section(path):
    return run(["readelf", "-d", "-W", path]).stdout


def main():
    build, src, prefix, libdir, includedir, bindir, version = sys.argv[1:8]
    libdir = libdir if os.path.isabs(libdir) else os.path.join(prefix, libdir)
    includedir = includedir if os.path.isabs(includedir) else os.path.join(prefix, includedir)
    bindir = bindir if os.path.isabs(bindir) else os.path.join(prefix, bindir)
    tmp = tempfile.mkdtemp(prefix="sandlot-test-install.")
    # sandlot-init is executed from the sandbox side of a user namespace:
    # the directories to it must be searchable by others.
    os.chmod(tmp, 0o755)
    try:
        check(build, src, tmp, prefix, libdir, includedir, bindir, version)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"1..{len(cases)}")
    failed = 0
    for i, (name, ok, why) in enumerate(cases, 1):
        if ok == "skip":
            print(f"ok {i} - {name} # SKIP {why}")
            continue
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            for line in why.splitlines() or [""]:
                print(f"#   {line}")
            failed += 1
    return 1 if failed else 0


def check(build, src, tmp, prefix, libdir, includedir, bindir, version):
    dest = os.path.join(tmp, "dest")
    r = run(["meson", "install", "-C", build, "--destdir", dest, "--no-rebuild", "--quiet"])
    if not case("meson install into a DESTDIR", r.returncode == 0, r.stdout + r.stderr):
        return
    d_inc, d_lib, d_bin = (dest + p for p in (includedir, libdir, bindir))

    header = os.path.join(d_inc, "sandlot.h")
    same = os.path.isfile(header) and \
        open(header, "rb").read() == open(os.path.join(src, "include/sandlot.h"), "rb").read()
    case("sandlot.h is installed", same, f"{header} missing or not include/sandlot.h")
    others = sorted(f for f in os.listdir(d_inc) if f != "sandlot.h") if os.path.isdir(d_inc) else []
    case("no other header is installed", not others, "also installed: " + ", ".join(others))

    major = version.split(".")[0]
    real = os.path.join(d_lib, f"libsandlot.so.{version}")
    soname_link = os.path.join(d_lib, f"libsandlot.so.{major}")
    dev_link = os.path.join(d_lib, "libsandlot.so")
    case("libsandlot.so.VERSION with its soname and development links",
         os.path.isfile(real) and not os.path.islink(real)
         and os.path.realpath(soname_link) == os.path.realpath(real)
         and os.path.realpath(dev_link) == os.path.realpath(real),
         f"in {d_lib}: {sorted(os.listdir(d_lib)) if os.path.isdir(d_lib) else 'none'}")
    soname = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", dynamic_section(real))
    case(f"its soname is libsandlot.so.{major}",
         soname and soname.group(1) == f"libsandlot.so.{major}",
         f"readelf -d: {soname.group(1) if soname else 'no SONAME'}")
    static = [f for f in os.listdir(d_lib) if f.endswith(".a")] if os.path.isdir(d_lib) else []
    case("no static library is installed", not static, ", ".join(static))

    pc_dir = os.path.join(d_lib, "pkgconfig")
    env = dict(os.environ, PKG_CONFIG_LIBDIR=pc_dir, PKG_CONFIG_PATH="")
    pkg = ["pkg-config", f"--define-variable=prefix={dest}{prefix}", "sandlot"]
    mv = run(pkg[:1] + ["--modversion", "sandlot"], env=env)
    if not case("sandlot.pc is installed, with the version", mv.returncode == 0
                and mv.stdout.strip() == version, mv.stdout + mv.stderr):
        return
    flags = run(pkg[:2] + ["--cflags", "--libs", "sandlot"], env=env)
    words = flags.stdout.split()
    case("pkg-config --cflags --libs sandlot names the installed header and library",
         flags.returncode == 0 and f"-I{d_inc}" in words and f"-L{d_lib}" in words
         and "-lsandlot" in words, flags.stdout + flags.stderr)

    hello = os.path.join(tmp, "hello")
    cc = run(["cc", "-std=c17", "-Wall", "-Wextra", "-Werror", "-o", hello,
              os.path.join(src, "examples/hello.c")] + words)
    if not case("examples/hello.c builds with those flags alone", cc.returncode == 0,
                cc.stdout + cc.stderr):
        return
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", dynamic_section(hello))
    defined = run(["nm", "--defined-only", hello]).stdout
    case("hello is linked against the shared libsandlot, none of it copied in",
         f"libsandlot.so.{major}" in needed and " sandlot_create" not in defined
         and "sandlot__" not in defined,
         f"NEEDED: {needed}; defined sandlot symbols: "
         + " ".join(l.split()[-1] for l in defined.splitlines() if "sandlot" in l))

    if os.geteuid() != 0:
        cases.append(("hello runs a command in a sandbox", "skip",
                      "needs root: sandboxes take a host uid range and cgroups"))
        return
    data = os.path.join(tmp, "data")
    os.mkdir(data)
    run_env = dict(os.environ, LD_LIBRARY_PATH=d_lib, SANDLOT_INIT=os.path.join(d_bin, "sandlot-init"),
                   SANDLOT_DATA_DIR=data, SANDLOT_STORAGE="tmpfs")
    ldd = run(["ldd", hello], env=run_env)
    case("at run time hello loads the installed libsandlot",
         re.search(r"libsandlot\.so\.\S+ => " + re.escape(d_lib) + "/", ldd.stdout), ldd.stdout)
    r = run([hello], env=run_env, timeout=120)
    case("hello creates a sandbox, runs a command, prints its output",
         r.returncode == 0 and r.stdout == "hello from hello, uid 1000\n",
         f"exit {r.returncode}\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}")
    r = run([hello, "echo to stderr >&2; echo out; exit 3"], env=run_env, timeout=120)
    case("hello passes on the command's output and exit code",
         r.returncode == 3 and sorted(r.stdout.splitlines()) == ["out", "to stderr"],
         f"exit {r.returncode}\nstdout: {r.stdout!r}\nstderr: {r.stderr!r}")
    r = run([hello], env=dict(run_env, SANDLOT_INIT=os.path.join(tmp, "no-such-init")),
            timeout=120)
    case("hello reports a library error with its message",
         r.returncode == 1 and "hello: create a sandbox: " in r.stderr
         and "no-such-init" in r.stderr,
         f"exit {r.returncode}\nstderr: {r.stderr!r}")


if __name__ == "__main__":
    sys.exit(main())
