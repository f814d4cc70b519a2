#!/usr/bin/env bash
# Build sandlot's programs with a sanitizer into a bin directory the
# integration tests can be pointed at (SANDLOT_TEST_BIN_DIR=DIR/bin), with
# the plain build's static sandlot-init beside them (a static program
# cannot be sanitized, and it runs inside the sandbox anyway):
#
#   scripts/sanitize-build.sh asan   $ASAN_BUILD (build-asan): ASan+UBSan;
#                                    sandlotd, sandlot, sandlot-client,
#                                    sandlot-gateway, and
#                                    the unit tests (and test-lib's fake
#                                    init) and fuzz replays
#   scripts/sanitize-build.sh tsan   $TSAN_BUILD (build-tsan): TSan;
#                                    sandlotd only (the CLI stays plain:
#                                    its threads are few and short-lived)
#
# Both are configured with sandlotd's fault-injection points
# (-Dfault_injection=true, tests/README.md).  Needs the plain build
# ($BUILD, `make`) first.  Prints the bin directory; fails if a build does.
set -eu
cd "$(dirname "$0")/.."
BUILD=${BUILD:-build}
kind=${1:?usage: scripts/sanitize-build.sh asan|tsan}
case $kind in
asan)
	dir=${ASAN_BUILD:-build-asan}
	sanitize=address,undefined
	;;
tsan)
	dir=${TSAN_BUILD:-build-tsan}
	sanitize=thread
	;;
*)
	echo "usage: scripts/sanitize-build.sh asan|tsan" >&2
	exit 2
	;;
esac
[ -x "$BUILD/bin/sandlot-init" ] || { echo "no $BUILD/bin/sandlot-init: run make first" >&2; exit 1; }
if [ ! -f "$dir/build.ninja" ]; then
	meson setup "$dir" -Db_sanitize=$sanitize -Db_lundef=false -Dfault_injection=true >/dev/null
fi
if [ "$kind" = asan ]; then
	# Not `ninja` alone: the static sandlot-init does not link sanitized.
	# The unit tests, the fuzz replays and test-lib's hostile fake-init.
	# (build.ninja brought up to date first: a build dir set up before a
	# new test was added would not list it.)
	ninja --quiet -C "$dir" build.ninja >&2
	targets=$(cd "$dir" && ninja -t targets all |
		grep -oE '^tests/[^:]*(test-[a-z0-9_-]+|fuzz-[a-z0-9_]+-replay|fake-init)' | sort -u)
	programs="src/daemon/sandlotd src/cli/sandlot src/cli/sandlot-client src/gateway/sandlot-gateway"
	# shellcheck disable=SC2086
	ninja --quiet -C "$dir" $targets $programs >&2
	mkdir -p "$dir/bin"
	cp -f "$dir/src/daemon/sandlotd" "$dir/src/cli/sandlot" "$dir/src/cli/sandlot-client" \
		"$dir/src/gateway/sandlot-gateway" "$BUILD/bin/sandlot-init" "$dir/bin/"
else
	ninja --quiet -C "$dir" src/daemon/sandlotd >&2
	mkdir -p "$dir/bin"
	cp -f "$dir/src/daemon/sandlotd" "$BUILD/bin/sandlot" "$BUILD/bin/sandlot-client" \
		"$BUILD/bin/sandlot-init" "$dir/bin/"
	# The static sandlot's glibc twin, which it runs for network runs
	# (src/cli/meson.build), where the plain build has one.
	if [ -x "$BUILD/bin/sandlot-glibc" ]; then
		cp -f "$BUILD/bin/sandlot-glibc" "$dir/bin/"
	fi
fi
echo "$dir/bin"
