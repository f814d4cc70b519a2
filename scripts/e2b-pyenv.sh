#!/usr/bin/env bash
# A virtualenv with E2B's Python SDKs (e2b, e2b-code-interpreter) and pytest
# at the versions pinned in tests/e2b/requirements.txt, for the E2B SDK
# tests (tests/e2b/python).  Prints the venv's python.
#
# Usage: scripts/e2b-pyenv.sh [VENV_DIR]   (default build/e2b-pyenv)
# The venv is reused while requirements.txt is unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-${BUILD:-build}/e2b-pyenv}
req=tests/e2b/requirements.txt
want=$(sha256sum "$req" | cut -d' ' -f1)
{
	if ! [ -x "$venv/bin/python" ] || [ "$(cat "$venv/.sandlot-stamp" 2>/dev/null)" != "$want" ]; then
		rm -rf "$venv"
		/usr/bin/python3 -m venv "$venv"
		"$venv/bin/python" -m pip --disable-pip-version-check -q install --prefer-binary -r "$req"
		echo "$want" >"$venv/.sandlot-stamp"
	fi
} >&2
echo "$venv/bin/python"
