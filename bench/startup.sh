#!/bin/sh
# Wrapper: the benchmark is bench/startup.py (Debian's python3, stdlib only).
exec /usr/bin/python3 "$(dirname "$0")/startup.py" "$@"
