"""Tests of the sandlot Python package (a package, so that its conftest does not
replace the `conftest` module other test directories import from)."""
