#!/usr/bin/env bash
# The whole test suite, ending with one summary line "N passed, N failed,
# N skipped":
#   - unit tests (plain build), fuzz targets replaying their corpora;
#   - the same under ASan+UBSan;
#   - the integration tests (CLI, daemon, interpreter hosts; the tests of
#     behaviour both backends must have run with ns sandboxes, and a
#     representative subset of them with vm sandboxes too: SANDLOT_TEST_VM,
#     tests/integration/conftest.py; `make check-vm` runs all of them with
#     vm sandboxes), and the Python
#     client's in a virtualenv with its frameworks pinned,
#     with sandlotd and the CLI built with ASan+UBSan (sandlot-init is
#     static and stays plain): every sanitizer report fails its test;
#   - the MCP server's and the TypeScript client's suites (node) against the
#     plain build, so the binaries as shipped run end to end too;
#   - every libFuzzer target for FUZZ_SECONDS (clang);
#   - the daemon's concurrency tests under ThreadSanitizer.
#
# The integration suite runs once, sanitized, not also plain: the plain
# programs are the same code, and they are still exercised end to end by
# the MCP and TypeScript suites, by test-lib (libsandlot against real
# sandboxes) and by the benchmarks.  Measured on 2 cores (load 2-4, shared
# machine): the sanitized integration run took 300 s; a daemon that mostly
# waits on sandboxes slows far less under ASan than CPU-bound code does, so
# a second, plain run would add minutes and no check.
set -u
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
ASAN_BUILD=${ASAN_BUILD:-build-asan}
TSAN_BUILD=${TSAN_BUILD:-build-tsan}
PYTEST=${PYTEST:-/usr/bin/python3 -m pytest}
FUZZ_SECONDS=${FUZZ_SECONDS:-15}
passed=0 failed=0 skipped=0
# With SANDLOT_MUST_WORK=1 (.ci/run) a skip fails unless listed here.
export SANDLOT_MUST_WORK_SKIPS=$PWD/tests/must-work-skips.txt

# Every sanitizer report of the run is a file here (log_path), checked by
# the integration harness after each test and counted at the end.
SANDLOT_SANITIZER_REPORTS=$(mktemp -d /var/tmp/sandlot-sanitizer.XXXXXX)
export SANDLOT_SANITIZER_REPORTS
export ASAN_OPTIONS="log_path=$SANDLOT_SANITIZER_REPORTS/report:halt_on_error=1:exitcode=66:detect_leaks=1"
export UBSAN_OPTIONS="log_path=$SANDLOT_SANITIZER_REPORTS/report:halt_on_error=1:exitcode=66:print_stacktrace=1"
export TSAN_OPTIONS="log_path=$SANDLOT_SANITIZER_REPORTS/report:halt_on_error=1:exitcode=66:suppressions=$PWD/tests/tsan.supp"

# "== NAME" for each part, after the time the previous one took, so that a
# CI log shows where the time goes.
stage_name="" stage_t0=$(date +%s) check_t0=$stage_t0
stage() {
	stage_done
	stage_name=$1 stage_t0=$(date +%s)
	echo "== $1"
}
stage_done() {
	[ -z "$stage_name" ] ||
		echo "(${stage_name%%:*}: $(($(date +%s) - stage_t0)) s, load $(cut -d' ' -f1-3 /proc/loadavg))"
}

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

# Add pytest's summary in file $1 to the counts: "364 passed, 2 skipped in
# 12.3s" (-q) or framed by "=" signs.  No summary: one failure.
count_pytest() {
	local line n kind
	line=$(grep -E '^(=+ )?[0-9]+ (passed|failed|skipped|errors?|deselected)[^=]* in [0-9.]+s' "$1" | tail -n 1)
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
}

stage "unit tests"
meson test -C "$BUILD" --suite unit --print-errorlogs --num-processes 2
count_meson "$BUILD"

stage "unit tests under AddressSanitizer + UndefinedBehaviorSanitizer"
if asan_bin=$(BUILD=$BUILD ASAN_BUILD=$ASAN_BUILD scripts/sanitize-build.sh asan); then
	# The unit tests' reports go to their TAP output (meson prints it).
	ASAN_OPTIONS=halt_on_error=1:detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		meson test -C "$ASAN_BUILD" --suite unit --print-errorlogs --num-processes 2 --no-rebuild
	count_meson "$ASAN_BUILD"
else
	echo "ASan build failed"
	failed=$((failed + 1))
	asan_bin=$BUILD/bin
fi

stage "integration tests (CLI, daemon), interpreter hosts; sandlotd and CLI under ASan+UBSan"
out=$(mktemp)
SANDLOT_TEST_BIN_DIR=$PWD/$asan_bin SANDLOT_PLAIN_BIN_DIR=$PWD/$BUILD/bin \
	$PYTEST -q -rs -p no:cacheprovider tests/integration tests/interp 2>&1 | tee "$out"
count_pytest "$out"
rm -f "$out"

# The Python client's tests run in a virtualenv with the frameworks its
# adapters are tested against, pinned (scripts/python-frameworks.sh), and
# the sanitized sandlotd.
stage "Python client (clients/python) and its adapters in the real frameworks; sandlotd under ASan+UBSan"
out=$(mktemp)
if pyenv=$(scripts/python-frameworks.sh); then
	SANDLOT_TEST_BIN_DIR=$PWD/$asan_bin SANDLOT_PLAIN_BIN_DIR=$PWD/$BUILD/bin \
		"$pyenv" -m pytest -q -rs -p no:cacheprovider -W ignore::DeprecationWarning \
		-o asyncio_mode=auto -o asyncio_default_fixture_loop_scope=function \
		clients/python/tests 2>&1 | tee "$out"
	count_pytest "$out"
else
	echo "could not make the frameworks' virtualenv (scripts/python-frameworks.sh)"
	failed=$((failed + 1))
fi
rm -f "$out"

# Whether tests/must-work-skips.txt has "node:NAME  # reason" for NAME.
node_skip_listed() {
	NAME=$1 awk '
		index($0, "node:") == 1 && match($0, /[ \t]+#[ \t]*[^ \t]/) {
			if (substr($0, 6, RSTART - 6) == ENVIRON["NAME"]) found = 1
		}
		END { exit !found }' tests/must-work-skips.txt
}

# Add the results of node's TAP reporter in $1 to the counts: "# pass N",
# "# fail N", "# cancelled N" from its summary, and a skip for every test or
# suite reported "# SKIP" or "# TODO" (node's own "# skipped" leaves out
# skipped suites, which hide every test in them).  $2 names the suite when
# there is no summary (it did not run to the end).  With SANDLOT_MUST_WORK=1
# a skip or todo not listed as "node:NAME  # reason" in
# tests/must-work-skips.txt is a failure instead.
count_node_tap() {
	local tap_file=$1
	if ! grep -qE '^# pass [0-9]+$' "$tap_file"; then
		echo "the $2 tests did not run to the end (no TAP summary)"
		failed=$((failed + 1))
		return
	fi
	n() { grep -E "^# $1 [0-9]+$" "$tap_file" | tail -n 1 | grep -oE '[0-9]+$' || echo 0; }
	passed=$((passed + $(n pass)))
	failed=$((failed + $(n fail) + $(n cancelled)))
	# A failing before/after hook fails its suite without failing a test:
	# node's summary leaves it out of "# fail".
	failed=$((failed + $(grep -cE "^ *failureType: 'hookFailed'" "$tap_file" || true)))
	local name
	while IFS= read -r name; do
		if [ "${SANDLOT_MUST_WORK:-}" = 1 ] && ! node_skip_listed "$name"; then
			echo "skipped under SANDLOT_MUST_WORK=1 (not in tests/must-work-skips.txt): $name"
			failed=$((failed + 1))
		else
			skipped=$((skipped + 1))
		fi
	done < <(grep -E '^ *(not )?ok [0-9]+ - .* # (SKIP|TODO)' "$tap_file" |
		sed -E 's/^ *(not )?ok [0-9]+ - (.*) # (SKIP|TODO).*/\2/')
}

# The fleet: sandlotd nodes in network namespaces behind HAProxy and
# sandlot-gateway (tests/fleet, its own pytest run: its conftest loads the
# integration suite's), then deploy/'s manifests checked offline.
stage "fleet: nodes in network namespaces behind HAProxy and the gateway; sandlotd and the gateway under ASan+UBSan"
out=$(mktemp)
SANDLOT_TEST_BIN_DIR=$PWD/$asan_bin SANDLOT_PLAIN_BIN_DIR=$PWD/$BUILD/bin \
	$PYTEST -q -rs -p no:cacheprovider tests/fleet 2>&1 | tee "$out"
count_pytest "$out"
rm -f "$out"
stage "fleet: deploy/ checked offline (kustomize, kubernetes-types, haproxy -c, Nomad HCL)"
tap=$(mktemp)
make -s fleet-manifests-check FLEET_TAP="$tap"
count_node_tap "$tap" fleet-manifests
rm -f "$tap"

stage "MCP server over stdio (sandlot mcp) and Streamable HTTP (sandlotd /mcp) under the official MCP SDK client"
tap=$(mktemp)
make -s mcp-check MCP_TAP="$tap"
count_node_tap "$tap" MCP
rm -f "$tap"

# E2B's own SDKs against the sanitized sandlotd: its reports land in
# SANDLOT_SANITIZER_REPORTS and fail the run at the end.
stage "E2B-compatible API under E2B's own SDKs (npm e2b, PyPI e2b); sandlotd under ASan+UBSan"
tap=$(mktemp)
SANDLOT_TEST_BIN_DIR=$PWD/$asan_bin make -s e2b-js-check E2B_TAP="$tap"
count_node_tap "$tap" E2B
rm -f "$tap"
out=$(mktemp)
if pyenv=$(scripts/e2b-pyenv.sh); then
	SANDLOT_TEST_BIN_DIR=$PWD/$asan_bin "$pyenv" -m pytest -q -rs -p no:cacheprovider tests/e2b/python 2>&1 |
		tee "$out"
	count_pytest "$out"
else
	echo "could not make the E2B SDKs' virtualenv (scripts/e2b-pyenv.sh)"
	failed=$((failed + 1))
fi
rm -f "$out"

stage "TypeScript client (clients/typescript): npm ci, tsc, node --test"
if ! command -v node >/dev/null || [ "$(node -p 'process.versions.node.split(".")[0]' 2>/dev/null || echo 0)" -lt 20 ]; then
	echo "SKIP: the TypeScript tests need Node.js 20 or later and npm (not found)"
	if [ "${SANDLOT_MUST_WORK:-}" = 1 ]; then failed=$((failed + 1)); else skipped=$((skipped + 1)); fi
else
	out=$(mktemp)
	make -s ts-check TS_REPORTER=tap 2>&1 | tee "$out"
	count_node_tap "$out" TypeScript
	rm -f "$out"
fi

stage "libFuzzer: every fuzz target for ${FUZZ_SECONDS}s (scripts/fuzz.sh)"
if ! command -v clang >/dev/null; then
	echo "FAIL: clang is not installed (Makefile TEST_DEPS: clang, libclang-rt-14-dev)"
	failed=$((failed + 1))
else
	out=$(mktemp)
	FUZZ_SECONDS=$FUZZ_SECONDS scripts/fuzz.sh 2>&1 | tee "$out"
	n=$(grep -c '^ok ' "$out")
	f=$(grep -c '^FAILED ' "$out")
	passed=$((passed + n)) failed=$((failed + f))
	[ "$((n + f))" -gt 0 ] || failed=$((failed + 1))
	rm -f "$out"
fi

stage "the daemon's concurrency tests with sandlotd under ThreadSanitizer"
if tsan_bin=$(BUILD=$BUILD TSAN_BUILD=$TSAN_BUILD scripts/sanitize-build.sh tsan); then
	out=$(mktemp)
	# shellcheck disable=SC2046
	# (ns only: the vm runs test the same daemon code, and they ran above.)
	SANDLOT_TEST_VM=none SANDLOT_TEST_BIN_DIR=$PWD/$tsan_bin \
		$PYTEST -q -rs -p no:cacheprovider $(grep -v '^#' tests/tsan-tests.txt) 2>&1 | tee "$out"
	count_pytest "$out"
	rm -f "$out"
else
	echo "TSan build failed"
	failed=$((failed + 1))
fi

stage_done
echo "(scripts/check.sh in all: $(($(date +%s) - check_t0)) s)"

# Reports no test took as its own (a client suite's daemon, say).
left=$(find "$SANDLOT_SANITIZER_REPORTS" -type f ! -name '*.reported' | sort)
if [ -n "$left" ]; then
	echo "== sanitizer reports outside the integration harness"
	for f in $left; do
		echo "--- $f"
		head -c 20000 "$f"
		failed=$((failed + 1))
	done
fi
rm -rf "$SANDLOT_SANITIZER_REPORTS"

echo
echo "$passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
