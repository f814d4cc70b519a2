"""The examples of the Python docs (docs/python.md, langchain-python.md,
deepagents-python.md, codeact.md, the README's and clients/python/README.md's)
run as scripts against a real sandlotd, and print what the docs say they
print (comment lines right after a print).  Every ```python block of those
pages is one: each must follow a "<!-- runnable" line."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
DOCS = ["docs/python.md", "docs/langchain-python.md", "docs/deepagents-python.md", "docs/codeact.md",
        "README.md", "clients/python/README.md"]


def runnable_blocks(text):
    return re.findall(r"<!-- runnable[^\n]*-->\n```python\n(.*?)\n```", text, re.S)


def expected_output(block):
    """Standalone comment lines that follow a print(...) line or another such
    comment: what the block prints, in order."""
    out, after_print, depth = [], False, 0
    for line in block.splitlines():
        s = line.strip()
        if depth > 0:                       # a print(...) spanning lines
            depth += s.count("(") - s.count(")")
            continue
        if s.startswith("# ") and after_print:
            out.append(s[2:])
            continue
        after_print = s.startswith("print(")
        if after_print:
            depth = s.count("(") - s.count(")")
    return out


@pytest.mark.parametrize("doc", DOCS)
def test_doc_examples_run(doc, sandlotd, client, tmp_path):
    text = (REPO / doc).read_text()
    blocks = runnable_blocks(text)
    assert blocks, f"{doc} has no runnable example"
    assert len(blocks) == text.count("```python\n"), f"{doc} has a python block not marked runnable"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDLOT_")}
    env["SANDLOT_HOST"] = f"unix:{sandlotd.sock}"
    env["PYTHONPATH"] = str(REPO / "clients" / "python")
    for i, block in enumerate(blocks):
        script = tmp_path / f"example{i}.py"
        script.write_text(block + "\n")
        p = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=180)
        assert p.returncode == 0, f"{doc} example {i} failed:\n{p.stdout}\n{p.stderr}"
        lines = p.stdout.splitlines()
        want = expected_output(block)
        got = [ln for ln in lines if ln in want]
        assert got == want, f"{doc} example {i} printed:\n{p.stdout}\nexpected lines: {want}"
