#!/usr/bin/env bash
# Runs deepagentsjs's sandbox provider standard tests (libs/standard-tests of
# github.com/langchain-ai/deepagentsjs, @langchain/sandbox-standard-tests; not
# published on npm) against the TypeScript SandlotBackend, on a sandlotd of
# its own.  Not part of `make check` (it needs a checkout of that repository,
# which CI cannot fetch); clients/typescript/test/deepagents.test.ts keeps a
# test of each behaviour the suite checks.
#
# Usage: scripts/deepagentsjs-standard-tests.sh DEEPAGENTSJS   (a clone: work tree or bare)
# Needs root, `make`, and clients/typescript built (npm ci && npm run build).
# The suite's sources are copied into a temporary directory with vitest
# (VITEST_VERSION, default 4.1.12) and removed afterwards.
set -euo pipefail
src=${1:?usage: $0 DEEPAGENTSJS_CHECKOUT}
cd "$(dirname "$0")/.."
repo=$PWD
ts=$repo/clients/typescript
bin=${SANDLOT_TEST_BIN_DIR:-$repo/${BUILD:-build}/bin}
[ -x "$bin/sandlotd" ] || { echo "not built: $bin/sandlotd (run make)" >&2; exit 2; }
[ -f "$ts/dist/deepagents.js" ] && [ -d "$ts/node_modules/deepagents" ] ||
	{ echo "clients/typescript is not built: cd clients/typescript && npm ci && npm run build" >&2; exit 2; }

work=$(mktemp -d /tmp/sandlot-dajs-std.XXXXXX)
daemon=
cleanup() {
	if [ -n "$daemon" ] && kill -0 "$daemon" 2>/dev/null; then
		kill -TERM "$daemon"
		wait "$daemon" || true
	fi
	rm -rf "$work"
}
trap cleanup EXIT

mkdir -p "$work/suite" "$work/t"
if [ -d "$src/libs/standard-tests/src" ]; then
	cp -r "$src/libs/standard-tests/src" "$work/suite/src"
else
	git -C "$src" archive HEAD libs/standard-tests/src | tar -x -C "$work/suite" --strip-components=2
fi
rev=$(git -C "$src" rev-parse --short HEAD 2>/dev/null || echo unknown)
ver=$(git -C "$src" show HEAD:libs/standard-tests/package.json 2>/dev/null |
	sed -n 's/^ *"version": *"\(.*\)".*/\1/p' | head -1)

cd "$work"
echo '{ "name": "sandlot-dajs-standard-tests", "private": true, "type": "module" }' >package.json
npm install --no-audit --no-fund --loglevel=error "vitest@${VITEST_VERSION:-4.1.12}" >&2
ln -s "$ts/node_modules/deepagents" node_modules/deepagents
ln -s "$ts" node_modules/sandlot
echo '{"compilerOptions":{"target":"ES2022","module":"ESNext","moduleResolution":"bundler","strict":true}}' >tsconfig.json
cp tsconfig.json suite/tsconfig.json
cat >vitest.config.ts <<'EOF'
import { defineConfig } from "vitest/config";
export default defineConfig({ test: { include: ["t/*.test.ts"], fileParallelism: false } });
EOF
cat >t/sandlot.test.ts <<'EOF'
import { sandboxStandardTests } from "../suite/src/vitest.js";
import { Sandlot } from "sandlot";
import { SandlotBackend } from "sandlot/deepagents";

const client = new Sandlot({ socketPath: process.env.SANDLOT_STD_SOCKET! });
sandboxStandardTests({
  name: "SandlotBackend",
  sequential: true,
  timeout: 60_000,
  createSandbox: (opts) => SandlotBackend.create({ client, initialFiles: opts?.initialFiles }),
  createUninitializedSandbox: () => new SandlotBackend({ client }),
  closeSandbox: (sb) => sb.close(),
  resolvePath: (name) => `/home/user/${name}`,
});
EOF

"$bin/sandlotd" --listen "unix:$work/sandlot.sock" --data-dir "$work/data" >"$work/sandlotd.log" 2>&1 &
daemon=$!
# Up when its health route answers (polled for up to 10 s).
for _ in $(seq 100); do
	curl -sf --unix-socket "$work/sandlot.sock" http://sandlot/v1/health >/dev/null && break
	kill -0 "$daemon" 2>/dev/null || { cat "$work/sandlotd.log" >&2; exit 1; }
	sleep 0.1
done
echo "deepagentsjs $rev, @langchain/sandbox-standard-tests ${ver:-?}" >&2
SANDLOT_STD_SOCKET=$work/sandlot.sock npx vitest run
