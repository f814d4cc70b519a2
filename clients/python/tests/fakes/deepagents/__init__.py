"""Test stand-in for deepagents (see ../README.md)."""
