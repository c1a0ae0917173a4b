"""docs/architecture.md names every API key's handler module, and a module-map row for every
module of security/ (the map a newcomer reads first stays complete)."""

from __future__ import annotations

import re
from pathlib import Path

from samsa.server.handlers import HANDLERS

ROOT = Path(__file__).resolve().parents[2]
DOC = (ROOT / "docs" / "architecture.md").read_text()


def test_every_api_key_has_its_handler_in_the_table():
    table = DOC[DOC.index("**Each Kafka API's handler**"):DOC.index("Any other API key")]
    rows = [r for r in table.splitlines() if r.startswith("| ") and "handlers/" in r]
    missing = []
    for key, handler in sorted(HANDLERS.items()):
        module = "server/handlers/" + handler.fn.__module__.rsplit(".", 1)[1] + ".py"
        if not any(re.search(rf"(^|\D){key} {handler.name}\b", r.split("|")[1]) and module in r for r in rows):
            missing.append(f"{key} {handler.name} ({module})")
    assert not missing, f"docs/architecture.md's API table misses {missing}"


def test_every_security_module_is_in_the_module_map():
    missing = [p.name for p in sorted((ROOT / "samsa" / "security").glob("*.py"))
               if p.name != "__init__.py" and f"`security/{p.name}`" not in DOC]
    assert not missing, missing
