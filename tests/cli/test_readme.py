"""Every code block of the README runs as written, pasted into a file (or a shell).

Blocks aimed at ``localhost:9092`` run against this module's embedded broker instead: the
address is the only thing changed. A block that starts something long-running says so in a
``<!-- readme-test: skip (why, and which test runs it) -->`` comment right above it.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from broker_process import ROOT

BLOCK = re.compile(r"(?:<!-- readme-test: skip \((?P<why>[^)]*)\) -->\n)?```(?P<lang>\w*)\n(?P<code>.*?)```", re.S)


def blocks() -> list[tuple[int, str, str, str | None]]:
    text = (ROOT / "README.md").read_text()
    return [(text.count("\n", 0, m.start()) + 1, m["lang"], m["code"], m["why"]) for m in BLOCK.finditer(text)]


def test_every_block_runs_or_says_why_not():
    for line, lang, _, why in blocks():
        assert why or lang in ("python", "sh"), f"README.md:{line}: a ```{lang} block neither runs nor says why"


@pytest.mark.parametrize("line,lang,code", [(line, lang, code) for line, lang, code, why in blocks() if not why],
                         ids=lambda v: str(v) if isinstance(v, int) else "")
def test_block_runs(line, lang, code, broker, tmp_path: Path):
    code = code.replace("localhost:9092", broker.bootstrap_servers)
    if lang == "python":
        script = tmp_path / "snippet.py"
        script.write_text(code)
        cmd = [sys.executable, str(script)]
    else:
        cmd = ["bash", "-euo", "pipefail", "-c", code]
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin", "HOME": str(tmp_path)}
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, f"README.md:{line} failed:\n{r.stdout}\n{r.stderr}"
