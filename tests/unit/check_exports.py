#!/usr/bin/env python3
"""libsandlot.so exports exactly the functions include/sandlot.h declares.

Usage: check_exports.py LIBSANDLOT_SO SANDLOT_H

Everything else in the library (the sandlot__* internals, the helpers of the
programs, the Debian libraries linked in) is hidden: built with
-fvisibility=hidden, with SANDLOT_API on each public declaration.  A symbol
exported by mistake becomes ABI that programs can come to depend on; a
declared function that is not exported fails at link time in programs that
use the shared library.  Both are checked here, with `nm -D`.  TAP output.
"""
import re
import subprocess
import sys


def exported(so):
    out = subprocess.run(["nm", "-D", "--defined-only", "--format=posix", so],
                         check=True, capture_output=True, text=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def declared(header):
    text = open(header, encoding="utf-8").read()
    text = re.sub(r"/\*.*?\*/", " ", text, flags=re.S)
    # SANDLOT_API <return type> <name>(  (a declaration may span lines)
    return set(re.findall(r"\bSANDLOT_API\s+[^;(]*?\b(sandlot_\w+)\s*\(", text))


def main():
    so, header = sys.argv[1], sys.argv[2]
    have, want = exported(so), declared(header)
    cases = []
    cases.append(("the header declares public functions", len(want) > 20,
                  f"only {len(want)} SANDLOT_API declarations found in {header}"))
    extra = sorted(have - want)
    cases.append(("nothing is exported that sandlot.h does not declare", not extra,
                  "exported but not declared: " + ", ".join(extra)))
    missing = sorted(want - have)
    cases.append(("every function sandlot.h declares is exported", not missing,
                  "declared but not exported: " + ", ".join(missing)))
    internal = sorted(s for s in have if not s.startswith("sandlot_") or s.startswith("sandlot__"))
    cases.append(("only sandlot_* names, no sandlot__* internals", not internal,
                  "exported: " + ", ".join(internal)))
    print(f"1..{len(cases)}")
    failed = 0
    for i, (name, ok, why) in enumerate(cases, 1):
        print(f"{'ok' if ok else 'not ok'} {i} - {name}")
        if not ok:
            print(f"#   {why}")
            failed += 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
