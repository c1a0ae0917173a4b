"""The console's view of a Schema Registry: its subjects, their versions and schemas, through
the registry's REST API (``--schema-registry-url``). A registry error is shown in its own words."""

from __future__ import annotations

import json
from typing import Any

from starlette.concurrency import run_in_threadpool

from samsa.console.service import ConsoleError
from samsa.serialization.schema_registry import SchemaRegistryClient, SchemaRegistryError


class RegistryView:
    def __init__(self, url: str):
        self.url = url
        self.client = SchemaRegistryClient({"url": url, "timeout": 10})

    async def _call(self, method: str, path: str, query: dict | None = None) -> Any:
        try:
            return await run_in_threadpool(self.client.request, method, path, None, query)
        except SchemaRegistryError as e:
            status = e.status if e.status in (404, 422) else 503
            raise ConsoleError(f"The schema registry at {self.url}: {e.message}", status) from None

    async def subjects(self) -> dict[str, Any]:
        rows = []
        for v in await self._call("GET", "/schemas", {"latestOnly": "true"}):
            rows.append({"subject": v["subject"], "version": v["version"], "id": v["id"],
                         "type": v.get("schemaType", "AVRO"), "references": len(v.get("references") or [])})
        level = (await self._call("GET", "/config"))["compatibilityLevel"]
        mode = (await self._call("GET", "/mode"))["mode"]
        return {"subjects": rows, "level": level, "mode": mode, "registry_url": self.url}

    async def subject(self, subject: str, version: str | None) -> dict[str, Any]:
        q = SchemaRegistryClient._q(subject)
        versions = await self._call("GET", f"/subjects/{q}/versions")
        shown = await self._call("GET", f"/subjects/{q}/versions/{version or 'latest'}")
        level = (await self._call("GET", f"/config/{q}", {"defaultToGlobal": "true"}))["compatibilityLevel"]
        text = shown["schema"]
        try:
            text = json.dumps(json.loads(text), indent=2)
        except ValueError:
            pass
        return {"subject": subject, "versions": versions, "shown": shown, "schema_text": text, "level": level,
                "type": shown.get("schemaType", "AVRO"), "registry_url": self.url}
