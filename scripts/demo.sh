#!/usr/bin/env bash
# A sandboxed example end to end: what `make demo` shows a new user.
set -eu
cd "$(dirname "$0")/.."
S=build/bin/sandlot
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
printf 'city,temp\nOslo,3\nLima,19\nCairo,24\n' > "$work/weather.csv"

echo "\$ sandlot run -- python3 -c 'print(6 * 7)'"
$S run -- python3 -c 'print(6 * 7)'

echo
echo "\$ sandlot run --upload weather.csv --download hottest.txt -- python3 -c '...'"
(cd "$work" && "$OLDPWD/$S" run --upload weather.csv --download hottest.txt -- python3 -c '
import csv
rows = list(csv.DictReader(open("weather.csv")))
best = max(rows, key=lambda r: int(r["temp"]))
open("hottest.txt", "w").write(best["city"] + "\n")
print("read", len(rows), "rows inside the sandbox")')
echo "downloaded hottest.txt: $(cat "$work/hottest.txt")"

echo
echo "\$ sandlot run -- sh -c 'id; grep -E \"CapEff|NoNewPrivs|Seccomp:\" /proc/self/status; ls /'"
$S run -- sh -c 'id; grep -E "CapEff|NoNewPrivs|Seccomp:" /proc/self/status; ls /'

echo
echo "\$ sandlot run --memory 64M --timeout 2s -- python3 -c 'x = bytearray(1 << 30)'"
set +e
$S run --memory 64M --timeout 2s -- python3 -c 'x = bytearray(1 << 30); x[::4096] = b"x" * len(x[::4096])'
echo "exit status: $?"
echo
echo "\$ sandlot run --timeout 1s -- sh -c 'setsid sleep 100 & sleep 100'"
$S run --timeout 1s -- sh -c 'setsid sleep 100 & sleep 100'
echo "exit status: $? (124: timed out; nothing survives)"
echo
echo "\$ sandlot run --json -- sh -c 'echo hi; echo result > out.txt'"
$S run --json -- sh -c 'echo hi; echo result > out.txt'
