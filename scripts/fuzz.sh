#!/usr/bin/env bash
# Run every libFuzzer target (tests/fuzz, built with clang into $FUZZ_BUILD)
# for a fixed budget of FUZZ_SECONDS each, starting from its seed corpus.
# New inputs go to a temporary directory, never into the repository.  A
# target that finds a crash, a leak or a failed oracle fails: its input is
# kept in $FUZZ_ARTIFACTS (default /var/tmp/sandlot-fuzz-artifacts) and
# printed, ready to become a corpus file (tests/fuzz/README.md).
#
#   scripts/fuzz.sh              every target
#   scripts/fuzz.sh base64 ...   those targets
#
# Prints one line per target, "ok NAME ..." or "FAILED NAME ...", and exits
# with the number of failed targets.
set -u
cd "$(dirname "$0")/.."
FUZZ_BUILD=${FUZZ_BUILD:-build-fuzz}
FUZZ_SECONDS=${FUZZ_SECONDS:-20}
FUZZ_ARTIFACTS=${FUZZ_ARTIFACTS:-/var/tmp/sandlot-fuzz-artifacts}

if [ ! -f "$FUZZ_BUILD/build.ninja" ]; then
	# Sanitizers and coverage on every object, libFuzzer's main on the
	# targets only (tests/fuzz/meson.build).
	CC=clang meson setup "$FUZZ_BUILD" -Dfuzzing=true -Db_sanitize=address,undefined \
		-Db_lundef=false -Dc_args=-fsanitize=fuzzer-no-link >/dev/null || exit 1
fi
if [ $# -gt 0 ]; then
	targets="$*"
else
	targets=$(cd tests/fuzz && ls fuzz_*.c | sed -e 's/^fuzz_//' -e 's/\.c$//')
fi
# shellcheck disable=SC2086
ninja -C "$FUZZ_BUILD" $(for t in $targets; do echo "tests/fuzz/fuzz-$t"; done) >/dev/null || exit 1

mkdir -p "$FUZZ_ARTIFACTS"
work=$(mktemp -d /var/tmp/sandlot-fuzz.XXXXXX)
trap 'rm -rf "$work"' EXIT
failed=0
for t in $targets; do
	mkdir -p "$work/$t"
	log="$work/$t.log"
	# -timeout: one input taking over 10 s is a hang; -rss_limit_mb: a
	# parser's memory must stay bounded.
	if (cd "$work" && ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
		"$OLDPWD/$FUZZ_BUILD/tests/fuzz/fuzz-$t" -max_total_time="$FUZZ_SECONDS" -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=0 -artifact_prefix="$FUZZ_ARTIFACTS/$t-" \
		"$work/$t" "$OLDPWD/tests/fuzz/corpus/$t") >"$log" 2>&1; then
		echo "ok $t: $(grep -oE 'Done [0-9]+ runs in [0-9]+ second' "$log" | tail -n 1)"
	else
		failed=$((failed + 1))
		echo "FAILED $t"
		grep -E 'ERROR|SUMMARY|Test unit written|^==' "$log" | head -n 40
		for a in $(grep -oE "Test unit written to [^ ]+" "$log" | awk '{print $5}'); do
			echo "input ($a), base64: $(base64 -w0 "$a" | head -c 2000)"
		done
	fi
done
exit "$failed"
