#!/usr/bin/env python3
"""Build a static program with musl-gcc: sandlot-init (src/init/meson.build)
and sandlot (src/cli/meson.build).

usage: musl_build.py [--static-pie] CC OUTPUT DEPFILE FLAGS... -- SOURCES...
                     [--link ARCHIVES...]

ARCHIVES (static libraries) go on the link's command line after the objects.
With --static-pie the program is a static position-independent executable
(its addresses randomized, as a dynamic program's are): musl-gcc's specs
cannot link one, so the link runs the compiler behind musl-gcc with musl's
own start files and libc, found where the specs say.

Each source is compiled on its own, with its own dependency file, and the
objects are then linked: given all sources at once, gcc writes the
dependencies of the last one only, and a change to a header the others
include (init.h, say) would leave a stale sandlot-init behind.  The
dependency files are merged into DEPFILE, one rule for OUTPUT.
"""
import os
import re
import subprocess
import sys
import tempfile


def prerequisites(path):
    """The prerequisites of a gcc dependency file, as written (escapes kept)."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    _, _, rest = text.partition(": ")
    return rest.split()


def static_pie_link(cc, flags, out, inputs):
    """The command that links `inputs` into a static PIE against musl."""
    wrapper = open(subprocess.run(["sh", "-c", 'command -v "$1"', "sh", cc],
                                  capture_output=True, text=True, check=True).stdout.strip()).read()
    specs = re.search(r'-specs\s+"?([^"\s]+)', wrapper).group(1)
    real = re.search(r"\$\{REALGCC:-([^}]+)\}", wrapper)
    real = os.environ.get("REALGCC") or (real.group(1) if real else "gcc")
    libdir = re.search(r"-L(/\S+)", open(specs).read()).group(1)

    def gcc_file(name):
        return subprocess.run([real, f"-print-file-name={name}"], capture_output=True,
                              text=True, check=True).stdout.strip()

    return [real, "-nostdlib", "-static-pie", "-Wl,--no-dynamic-linker", "-Wl,-z,relro,-z,now",
            *[f for f in flags if f.startswith(("-g", "-O", "-Wl,"))], "-o", out,
            f"{libdir}/rcrt1.o", f"{libdir}/crti.o", gcc_file("crtbeginS.o"), *inputs,
            "-L", libdir, "-lc", gcc_file("libgcc.a"), gcc_file("crtendS.o"), f"{libdir}/crtn.o"]


def main():
    args = sys.argv[1:]
    pie = args[0] == "--static-pie"
    if pie:
        args = args[1:]
    cc, out, depfile, *rest = args
    sep = rest.index("--")
    flags, sources = rest[:sep], rest[sep + 1:]
    archives = []
    if "--link" in sources:
        k = sources.index("--link")
        sources, archives = sources[:k], sources[k + 1:]
    with tempfile.TemporaryDirectory(dir=os.path.dirname(os.path.abspath(out))) as tmp:
        jobs = []
        for n, src in enumerate(sources):
            obj = os.path.join(tmp, f"{n}.o")
            cmd = [cc, *flags, "-c", "-MD", "-MF", obj + ".d", "-o", obj, src]
            jobs.append((obj, subprocess.Popen(cmd)))
        failed = [obj for obj, p in jobs if p.wait() != 0]
        if failed:
            return 1
        objs = [obj for obj, _ in jobs]
        if pie:
            link = subprocess.run(static_pie_link(cc, flags, out, objs + archives))
        else:
            link = subprocess.run([cc, "-static", *flags, "-o", out, *objs, *archives])
        if link.returncode != 0:
            return link.returncode
        deps = []
        for obj in objs:
            deps += [d for d in prerequisites(obj + ".d") if d not in deps]
    with open(depfile, "w") as f:
        f.write(out + ": " + " \\\n  ".join(deps) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
