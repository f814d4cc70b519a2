#!/usr/bin/env bash
# The whole test suite: unit tests (plain build), the same unit tests under
# ASan+UBSan, the integration tests driving the real CLI, and a leak check,
# and the MCP server's tests (node, the official MCP SDK client).
# Ends with one summary line "N passed, N failed, N skipped".
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ASAN_BUILD=${ASAN_BUILD:-build-asan}
PYTEST=${PYTEST:-/usr/bin/python3 -m pytest}
passed=0 failed=0 skipped=0

# Count results of the last `meson test` run from its JSON log.
count_meson() {
	local log=$1/meson-logs/testlog.json
	[ -f "$log" ] || { failed=$((failed + 1)); return; }
	local p f s
	read -r p f s < <(/usr/bin/python3 - "$log" <<'PY'
import json, sys
p = f = s = 0
for line in open(sys.argv[1]):
    r = json.loads(line)["result"]
    if r in ("OK", "EXPECTEDFAIL"): p += 1
    elif r == "SKIP": s += 1
    else: f += 1
print(p, f, s)
PY
)
	passed=$((passed + p)) failed=$((failed + f)) skipped=$((skipped + s))
}

echo "== unit tests"
meson test -C "$BUILD" --suite unit --print-errorlogs --num-processes 2
count_meson "$BUILD"

echo "== unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
if [ ! -f "$ASAN_BUILD/build.ninja" ]; then
	meson setup "$ASAN_BUILD" -Db_sanitize=address,undefined -Db_lundef=false >/dev/null
fi
targets=$(cd "$ASAN_BUILD" && ninja -t targets all | grep -oE '^tests/[^:]*(test-[a-z-]+|fuzz-[a-z]+-replay)' | sort -u)
# shellcheck disable=SC2086
if ninja -C "$ASAN_BUILD" $targets >/dev/null; then
	UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		meson test -C "$ASAN_BUILD" --suite unit --print-errorlogs --num-processes 2 --no-rebuild
	count_meson "$ASAN_BUILD"
else
	echo "ASan build failed"
	failed=$((failed + 1))
fi

echo "== integration tests (CLI, daemon), interpreter hosts, Python client"
out=$(mktemp)
$PYTEST -q -rs -p no:cacheprovider tests/integration tests/interp clients/python/tests 2>&1 | tee "$out"
# pytest's summary: "364 passed, 2 skipped in 12.3s" (-q) or framed by "=" signs.
line=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|errors?|deselected)[^=]* in [0-9.]+s' "$out" | tail -n 1)
for kind in passed failed skipped "errors?"; do
	n=$(echo "$line" | grep -oE "[0-9]+ $kind" | grep -oE '^[0-9]+' || true)
	n=${n:-0}
	case $kind in
	passed) passed=$((passed + n)) ;;
	skipped) skipped=$((skipped + n)) ;;
	*) failed=$((failed + n)) ;;
	esac
done
[ -n "$line" ] || failed=$((failed + 1))
rm -f "$out"

# Add the summary of node's TAP reporter in $1 ("# pass N", "# fail N",
# "# cancelled N", "# skipped N", "# todo N") to the counts; $2 names the
# suite when there is no summary (it did not run to the end).
count_node_tap() {
	if ! grep -qE '^# pass [0-9]+$' "$1"; then
		echo "the $2 tests did not run to the end (no TAP summary)"
		failed=$((failed + 1))
		return
	fi
	local tap_file=$1
	n() { grep -E "^# $1 [0-9]+$" "$tap_file" | tail -n 1 | grep -oE '[0-9]+$' || echo 0; }
	passed=$((passed + $(n pass)))
	failed=$((failed + $(n fail) + $(n cancelled)))
	skipped=$((skipped + $(n skipped) + $(n todo)))
}

echo "== MCP server (sandlot mcp) under the official MCP SDK client"
tap=$(mktemp)
make -s mcp-check MCP_TAP="$tap"
count_node_tap "$tap" MCP
rm -f "$tap"

echo "== TypeScript client (clients/typescript): npm ci, tsc, node --test"
if ! command -v node >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 20 ]; then
	echo "SKIP: the TypeScript tests need Node.js 20 or later and npm (not found)"
	skipped=$((skipped + 1))
else
	out=$(mktemp)
	make -s ts-check TS_REPORTER=tap 2>&1 | tee "$out"
	count_node_tap "$out" TypeScript
	rm -f "$out"
fi

echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
