"""The Schema Registry's REST API on Starlette: its paths, its JSON bodies and its error JSON
(``{"error_code": 40401, "message": "..."}``). Reads are answered here; a write on a process
that is not the elected writer is forwarded to the writer's URL and its answer passed back.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import urllib.error
import urllib.request
from typing import Any, Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from samsa.schema_registry import schemas
from samsa.schema_registry.registry import Registry, RestError
from samsa.schema_registry.store import StoreError

log = logging.getLogger(__name__)

CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
ACCEPTED = ("application/vnd.schemaregistry.v1+json", "application/vnd.schemaregistry+json", "application/json",
            "application/octet-stream")


def _json(body: Any, status: int = 200) -> Response:
    return Response(json.dumps(body), status_code=status, media_type=CONTENT_TYPE)


def _error(status: int, code: int, message: str) -> Response:
    return _json({"error_code": code, "message": message}, status)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


class Service:
    """The registry plus who writes: ``leader_url`` is None until elected (50004 for writes then)."""

    def __init__(self, registry: Registry, metrics: Any = None):
        self.registry = registry
        self.is_leader = False
        self.leader_url: str | None = None
        self.needs_sync = True
        self.metrics = metrics
        self.election_wait_s = 15.0   # how long a write waits for a writer to be elected before 50004

    def became(self, identity: dict | None, is_self: bool) -> None:
        self.is_leader = is_self
        self.needs_sync = True
        self.leader_url = None if identity is None else f"{identity['scheme']}://{identity['host']}:{identity['port']}"
        if self.metrics is not None:
            self.metrics.leader.set(1 if is_self else 0)


async def _body(request: Request) -> dict:
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype and ctype not in ACCEPTED:
        raise RestError(415, 415, "HTTP 415 Unsupported Media Type")
    raw = await request.body()
    try:
        body = json.loads(raw or b"{}")
    except ValueError as e:
        raise RestError(400, 400, f"Unexpected character in the request body: {e}") from None
    if not isinstance(body, dict):
        raise RestError(422, 422, "Unrecognized field or value: the body must be a JSON object")
    return body


def create_app(service: Service) -> Starlette:
    reg = service.registry
    metrics = service.metrics

    def read(fn: Callable[[Request], Any]) -> Callable:
        async def endpoint(request: Request) -> Response:
            try:
                result = await run_in_threadpool(fn, request)
                return result if isinstance(result, Response) else _json(result)
            except RestError as e:
                return _error(e.status, e.code, e.message)
            except StoreError as e:
                return _error(500, e.code, str(e))
        return endpoint

    def write(fn: Callable[[Request, dict], Any], with_body: bool = True) -> Callable:
        async def endpoint(request: Request) -> Response:
            try:
                body = await _body(request) if with_body else {}
                deadline = time.monotonic() + service.election_wait_s
                while service.leader_url is None and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)       # a rebalance names a writer within the session timeout
                if not service.is_leader:
                    return await run_in_threadpool(_forward, request, body if with_body else None)
                if service.needs_sync:
                    await run_in_threadpool(reg.store.sync)
                    service.needs_sync = False
                result = await run_in_threadpool(fn, request, body)
                return result if isinstance(result, Response) else _json(result)
            except RestError as e:
                if metrics is not None and e.code == 409:
                    metrics.incompatible.inc()
                return _error(e.status, e.code, e.message)
            except StoreError as e:
                return _error(500, e.code, str(e))
        return endpoint

    def _forward(request: Request, body: dict | None) -> Response:
        if service.leader_url is None:
            return _error(500, 50004, "Unknown leader: no schema registry process is elected to write yet")
        url = service.leader_url + request.url.path + (f"?{request.url.query}" if request.url.query else "")
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(url, data=data, method=request.method,
                                     headers={"Content-Type": CONTENT_TYPE, "Accept": CONTENT_TYPE})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                return Response(resp.read(), status_code=resp.status, media_type=CONTENT_TYPE)
        except urllib.error.HTTPError as e:
            return Response(e.read(), status_code=e.code, media_type=CONTENT_TYPE)
        except OSError as e:
            return _error(500, 50003, f"Error while forwarding the request to the leader {service.leader_url}: {e}")

    # ------------------------------------------------------------ schemas

    def schema_types(request: Request) -> list[str]:
        return ["JSON", "PROTOBUF", "AVRO"]

    def schemas_list(request: Request) -> list[dict]:
        q = request.query_params
        found = reg.all_schemas(q.get("subjectPrefix", ""), _flag(request, "deleted"), _flag(request, "latestOnly"))
        return _page(request, [v.to_json() for v in found])

    def _schema_id(request: Request) -> int:
        try:
            return int(request.path_params["id"])
        except ValueError:
            raise RestError(404, 40403, f"Schema {request.path_params['id']} not found") from None

    def schema_by_id(request: Request) -> dict:
        v = reg.schema_by_id(_schema_id(request), request.query_params.get("subject"))
        out = v.to_json()
        for k in ("subject", "version", "id"):
            out.pop(k, None)
        if _flag(request, "fetchMaxId"):
            out["maxId"] = reg.state.max_id
        return out

    def schema_text_by_id(request: Request) -> Response:
        return Response(reg.schema_by_id(_schema_id(request)).schema, media_type=CONTENT_TYPE)

    def id_subjects(request: Request) -> list[str]:
        return sorted({v.subject for v in reg.id_usages(_schema_id(request), _flag(request, "deleted"))})

    def id_versions(request: Request) -> list[dict]:
        return [{"subject": v.subject, "version": v.version}
                for v in reg.id_usages(_schema_id(request), _flag(request, "deleted"))]

    # ------------------------------------------------------------ subjects

    def subjects(request: Request) -> list[str]:
        return _page(request, reg.subjects(request.query_params.get("subjectPrefix", ""), _flag(request, "deleted"),
                                           _flag(request, "deletedOnly")))

    def versions(request: Request) -> list[int]:
        return reg.versions(request.path_params["subject"], _flag(request, "deleted"), _flag(request, "deletedOnly"))

    def version(request: Request) -> dict:
        p = request.path_params
        return reg.version(p["subject"], p["version"], _flag(request, "deleted")).to_json()

    def version_schema(request: Request) -> Response:
        p = request.path_params
        return Response(reg.version(p["subject"], p["version"], _flag(request, "deleted")).schema,
                        media_type=CONTENT_TYPE)

    def referenced_by(request: Request) -> list[int]:
        p = request.path_params
        return reg.referenced_by(p["subject"], p["version"])

    async def lookup(request: Request) -> Response:
        try:
            body = await _body(request)
            v = await run_in_threadpool(reg.lookup, request.path_params["subject"], body, _flag(request, "normalize"),
                                        _flag(request, "deleted"))
            return _json(v.to_json())
        except RestError as e:
            return _error(e.status, e.code, e.message)

    def register(request: Request, body: dict) -> dict:
        subject = request.path_params["subject"]
        t0 = time.monotonic()
        before = reg.state.max_id
        v = reg.register(subject, body, _flag(request, "normalize"))
        if metrics is not None:
            metrics.register_latency.observe(time.monotonic() - t0)
            if v.id > before:
                metrics.created.labels(v.schema_type.lower()).inc()
        return {"id": v.id, **{k: x for k, x in v.to_json().items() if k != "id"}}

    def delete_subject(request: Request, body: dict) -> list[int]:
        out = reg.delete_subject(request.path_params["subject"], _flag(request, "permanent"))
        if metrics is not None:
            metrics.deleted.inc(len(out))
        return out

    def delete_version(request: Request, body: dict) -> int:
        p = request.path_params
        out = reg.delete_version(p["subject"], p["version"], _flag(request, "permanent"))
        if metrics is not None:
            metrics.deleted.inc()
        return out

    # ------------------------------------------------------------ compatibility, config, mode

    async def compatibility(request: Request) -> Response:
        try:
            body = await _body(request)
            p = request.path_params
            problems = await run_in_threadpool(reg.compatibility, p["subject"], p.get("version"), body,
                                               _flag(request, "normalize"))
            out: dict[str, Any] = {"is_compatible": not problems}
            if _flag(request, "verbose"):
                out["messages"] = problems
            return _json(out)
        except RestError as e:
            if e.code == 40401 and "version" not in request.path_params:
                return _json({"is_compatible": True})   # nothing to be incompatible with
            return _error(e.status, e.code, e.message)

    def get_config(request: Request) -> dict:
        subject = request.path_params.get("subject")
        level = reg.level(subject, subject is None or _flag(request, "defaultToGlobal"))
        if level is None:
            raise RestError(404, 40408, f"Subject '{subject}' does not have subject-level compatibility configured")
        return {"compatibilityLevel": level}

    def put_config(request: Request, body: dict) -> dict:
        return {"compatibility": reg.set_level(request.path_params.get("subject"), body.get("compatibility"))}

    def delete_config(request: Request, body: dict) -> dict:
        return {"compatibilityLevel": reg.delete_level(request.path_params.get("subject"))}

    def get_mode(request: Request) -> dict:
        subject = request.path_params.get("subject")
        mode = reg.mode(subject, subject is None or _flag(request, "defaultToGlobal"))
        if mode is None:
            raise RestError(404, 40409, f"Subject '{subject}' does not have subject-level mode configured")
        return {"mode": mode}

    def put_mode(request: Request, body: dict) -> dict:
        return {"mode": reg.set_mode(request.path_params.get("subject"), body.get("mode"), _flag(request, "force"))}

    def delete_mode(request: Request, body: dict) -> dict:
        return {"mode": reg.delete_mode(request.path_params["subject"])}

    def root(request: Request) -> dict:
        return {}

    def contexts(request: Request) -> list[str]:
        return ["."]

    def leader(request: Request) -> dict:
        return {"leader": service.leader_url, "is_leader": service.is_leader}

    async def metrics_endpoint(request: Request) -> Response:
        if metrics is None:
            return _error(404, 404, "HTTP 404 Not Found")
        return Response(metrics.exposition(), media_type="text/plain; version=0.0.4")

    routes = [
        Route("/", read(root)),
        Route("/schemas", read(schemas_list)),
        Route("/schemas/types", read(schema_types)),
        Route("/schemas/ids/{id}", read(schema_by_id)),
        Route("/schemas/ids/{id}/schema", read(schema_text_by_id)),
        Route("/schemas/ids/{id}/subjects", read(id_subjects)),
        Route("/schemas/ids/{id}/versions", read(id_versions)),
        Route("/subjects", read(subjects)),
        Route("/subjects/{subject}", lookup, methods=["POST"]),
        Route("/subjects/{subject}", write(delete_subject, False), methods=["DELETE"]),
        Route("/subjects/{subject}/versions", read(versions), methods=["GET"]),
        Route("/subjects/{subject}/versions", write(register), methods=["POST"]),
        Route("/subjects/{subject}/versions/{version}", read(version), methods=["GET"]),
        Route("/subjects/{subject}/versions/{version}", write(delete_version, False), methods=["DELETE"]),
        Route("/subjects/{subject}/versions/{version}/schema", read(version_schema)),
        Route("/subjects/{subject}/versions/{version}/referencedby", read(referenced_by)),
        Route("/compatibility/subjects/{subject}/versions", compatibility, methods=["POST"]),
        Route("/compatibility/subjects/{subject}/versions/{version}", compatibility, methods=["POST"]),
        Route("/config", read(get_config), methods=["GET"]),
        Route("/config", write(put_config), methods=["PUT"]),
        Route("/config", write(delete_config, False), methods=["DELETE"]),
        Route("/config/{subject}", read(get_config), methods=["GET"]),
        Route("/config/{subject}", write(put_config), methods=["PUT"]),
        Route("/config/{subject}", write(delete_config, False), methods=["DELETE"]),
        Route("/mode", read(get_mode), methods=["GET"]),
        Route("/mode", write(put_mode), methods=["PUT"]),
        Route("/mode/{subject}", read(get_mode), methods=["GET"]),
        Route("/mode/{subject}", write(put_mode), methods=["PUT"]),
        Route("/mode/{subject}", write(delete_mode, False), methods=["DELETE"]),
        Route("/contexts", read(contexts)),
        Route("/v1/metadata/leader", read(leader)),
        Route("/metrics", metrics_endpoint),
    ]

    async def http_error(request: Request, exc: HTTPException) -> Response:
        return _error(exc.status_code, exc.status_code, f"HTTP {exc.status_code} {exc.detail}")

    async def crash(request: Request, exc: Exception) -> Response:
        log.exception("%s %s", request.method, request.url.path)
        return _error(500, 500, f"Internal Server Error: {exc}")

    return Starlette(routes=routes, exception_handlers={HTTPException: http_error, Exception: crash})


def _page(request: Request, items: list) -> list:
    try:
        offset = int(request.query_params.get("offset", 0))
        limit = int(request.query_params.get("limit", -1))
    except ValueError:
        return items
    items = items[max(offset, 0):]
    return items if limit < 0 else items[:limit]


__all__ = ["Service", "create_app", "schemas"]
