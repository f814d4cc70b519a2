#!/usr/bin/env python3
"""Build the static sandlot-init with musl-gcc (see src/init/meson.build).

usage: musl_build.py CC OUTPUT DEPFILE FLAGS... -- SOURCES...

Each source is compiled on its own, with its own dependency file, and the
objects are then linked: given all sources at once, gcc writes the
dependencies of the last one only, and a change to a header the others
include (init.h, say) would leave a stale sandlot-init behind.  The
dependency files are merged into DEPFILE, one rule for OUTPUT.
"""
import os
import subprocess
import sys
import tempfile


def prerequisites(path):
    """The prerequisites of a gcc dependency file, as written (escapes kept)."""
    with open(path) as f:
        text = f.read().replace("\\\n", " ")
    _, _, rest = text.partition(": ")
    return rest.split()


def main():
    cc, out, depfile, *rest = sys.argv[1:]
    sep = rest.index("--")
    flags, sources = rest[:sep], rest[sep + 1:]
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
        link = subprocess.run([cc, "-static", *flags, "-o", out, *objs])
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
