#!/usr/bin/env bash
# A virtualenv with the Python frameworks sandlot's adapters are tested
# against (LangChain, LangGraph, Deep Agents, langgraph-codeact,
# langchain-tests), at the versions pinned in
# clients/python/tests/constraints.txt, and the sandlot package itself
# installed from clients/python (as a user would).  Prints the venv's python.
#
# Usage: scripts/python-frameworks.sh [VENV_DIR]   (default build/pyenv)
# The frameworks are reused while constraints.txt and
# requirements-frameworks.txt are unchanged (pip's own cache, ~/.cache/pip
# or PIP_CACHE_DIR, keeps a new venv from downloading them again); sandlot
# is installed again each time.
set -euo pipefail
cd "$(dirname "$0")/.."
venv=${1:-${BUILD:-build}/pyenv}
tests=clients/python/tests
stamp_of() {
	cat "$tests/constraints.txt" "$tests/requirements-frameworks.txt" | sha256sum | cut -d' ' -f1
}
want=$(stamp_of)
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
{
	if ! [ -x "$venv/bin/python" ] || [ "$(cat "$venv/.sandlot-stamp" 2>/dev/null)" != "$want" ]; then
		rm -rf "$venv"
		/usr/bin/python3 -m venv "$venv"
		"${pip[@]}" install --prefer-binary -c "$tests/constraints.txt" -r "$tests/requirements-frameworks.txt"
		"${pip[@]}" install --prefer-binary --no-deps -c "$tests/constraints.txt" langgraph-codeact
		echo "$want" >"$venv/.sandlot-stamp"
	fi
	# sandlot itself, from its source directory, as `pip install ./clients/python` does
	"${pip[@]}" install --no-deps --force-reinstall ./clients/python
} >&2
echo "$venv/bin/python"
