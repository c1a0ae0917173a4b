"""The console's Starlette application: server-rendered pages (Jinja2) and one JSON endpoint.

Every page handler runs inside :func:`_page`, which turns what can go wrong into a page
with one clear sentence: a :class:`ConsoleError` (bad input, a missing topic or group), a
Kafka error (the broker's own words), or a broker that cannot be reached. The read-only
mode refuses every change (create, add partitions, delete, reset) with a 403 page.
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Awaitable, Callable
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.templating import Jinja2Templates

from samsa.client.admin import AsyncAdmin
from samsa.client.connection import KafkaConnectionError, KafkaTimeoutError
from samsa.console import browse as browsing
from samsa.console import reset as resets
from samsa.console.live import LiveFigures
from samsa.console.schemas import RegistryView
from samsa.console.service import ClusterService, ConsoleError
from samsa.protocol import errors

log = logging.getLogger(__name__)

TEMPLATES = Jinja2Templates(directory=str(Path(__file__).parent / "templates"))
TEMPLATES.env.filters["bytes"] = lambda n: "-" if n is None else _human_bytes(n)
TEMPLATES.env.filters["quote"] = lambda s: quote(str(s), safe="")


@dataclass
class Settings:
    bootstrap: str
    client_config: dict[str, str] = field(default_factory=dict)
    metrics_urls: list[str] = field(default_factory=list)
    read_only: bool = False
    schema_registry_url: str | None = None


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def create_app(settings: Settings) -> Starlette:
    state: dict[str, Any] = {}

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette):
        config = {"request.timeout.ms": "8000", "default.api.timeout.ms": "12000", **settings.client_config,
                  "bootstrap.servers": settings.bootstrap, "client.id": "samsa-console"}
        admin = AsyncAdmin(config)
        state["service"] = ClusterService(admin, settings.bootstrap)
        state["live"] = LiveFigures(settings.metrics_urls)
        try:
            yield
        finally:
            await admin.close()

    def render(request: Request, template: str, status: int = 200, **context: Any) -> Response:
        context.update(read_only=settings.read_only, bootstrap=settings.bootstrap,
                       registry=bool(settings.schema_registry_url),
                       live=bool(settings.metrics_urls), notice=request.query_params.get("notice"))
        return TEMPLATES.TemplateResponse(request, template, context, status_code=status)

    def page(handler: Callable[[Request, ClusterService], Awaitable[Response]], *, changes: bool = False):
        async def endpoint(request: Request) -> Response:
            if changes and settings.read_only:
                return render(request, "error.html", 403, title="Read-only",
                              message="This console is read-only (--read-only): it makes no changes.")
            try:
                return await handler(request, state["service"])
            except ConsoleError as e:
                return render(request, "error.html", e.status, title="Cannot do that", message=str(e))
            except errors.UnknownTopicOrPartitionError as e:
                return render(request, "error.html", 404, title="Not found", message=_kafka_message(e))
            except (KafkaConnectionError, KafkaTimeoutError, TimeoutError, OSError) as e:
                return render(request, "error.html", 503, title="Cluster unreachable",
                              message=f"Could not reach the cluster at {settings.bootstrap}: {e}")
            except errors.KafkaError as e:
                return render(request, "error.html", 400, title="The cluster refused", message=_kafka_message(e))
            except Exception as e:  # noqa: BLE001 - a page, never a stack trace
                log.exception("console page %s failed", request.url.path)
                return render(request, "error.html", 500, title="Unexpected error",
                              message=f"{type(e).__name__}: {e}")
        return endpoint

    async def cluster(request: Request, service: ClusterService) -> Response:
        cluster_id, brokers = await service.brokers()
        versions = await service.api_versions()
        return render(request, "cluster.html", cluster_id=cluster_id, brokers=brokers, versions=versions)

    async def topics(request: Request, service: ClusterService) -> Response:
        return render(request, "topics.html", topics=await service.topics())

    async def create_topic(request: Request, service: ClusterService) -> Response:
        form = await request.form()
        name = str(form.get("name", "")).strip()
        if not name:
            raise ConsoleError("Give the new topic a name.")
        partitions = _int(form.get("partitions"), "The number of partitions", -1)
        replication = _int(form.get("replication"), "The replication factor", -1)
        configs = _properties(str(form.get("configs", "")))
        await service.create_topic(name, partitions, replication, configs)
        return RedirectResponse(f"/topics/{quote(name, safe='')}?notice=" + quote(f"Created topic {name}."), 303)

    async def topic(request: Request, service: ClusterService) -> Response:
        name = request.path_params["name"]
        partitions, configs = await service.topic(name)
        return render(request, "topic.html", name=name, partitions=partitions, configs=configs)

    async def add_partitions(request: Request, service: ClusterService) -> Response:
        name = request.path_params["name"]
        total = _int((await request.form()).get("total"), "The new number of partitions")
        await service.add_partitions(name, total)
        return RedirectResponse(f"/topics/{quote(name, safe='')}?notice=" + quote(f"{name} has {total} partitions."),
                                303)

    async def confirm_delete(request: Request, service: ClusterService) -> Response:
        name = request.path_params["name"]
        await service.partitions(name)
        return render(request, "delete.html", name=name)

    async def delete_topic(request: Request, service: ClusterService) -> Response:
        name = request.path_params["name"]
        typed = str((await request.form()).get("confirm", ""))
        if typed != name:
            raise ConsoleError(f"To delete the topic, type its name '{name}' exactly (you typed '{typed}').")
        await service.delete_topic(name)
        return RedirectResponse("/topics?notice=" + quote(f"Deleted topic {name}."), 303)

    async def messages(request: Request, service: ClusterService) -> Response:
        name = request.path_params["name"]
        partitions = await service.partitions(name)
        params = dict(request.query_params)
        q = browsing.Query.parse(params, len(partitions))
        result = await browsing.browse(settings.bootstrap, settings.client_config, name, q) if params else None
        return render(request, "messages.html", name=name, q=q, result=result, partitions=len(partitions),
                      decodings=browsing.DECODINGS, params=params)

    async def groups(request: Request, service: ClusterService) -> Response:
        return render(request, "groups.html", groups=await service.groups())

    async def group(request: Request, service: ClusterService) -> Response:
        streams = await service.streams_group(request.path_params["group"])
        if streams is not None:
            return render(request, "streams_group.html", view=streams)
        share = await service.share_group(request.path_params["group"])
        if share is not None:
            return render(request, "share_group.html", view=share, choices=resets.CHOICES, plan=None, done=False,
                          form={})
        view = await service.group(request.path_params["group"])
        return render(request, "group.html", view=view, choices=resets.CHOICES, plan=None, done=False, form={})

    async def reset_group(request: Request, service: ClusterService) -> Response:
        group_id = request.path_params["group"]
        form = {k: str(v) for k, v in (await request.form()).items()}
        p = await resets.plan(service, group_id, form.get("choice", ""), form.get("value", ""),
                              form.get("topic", "").strip())
        done = form.get("execute") == "1"
        if done:
            await resets.execute(service, p)
        if p.share:
            share = await service.share_group(group_id)
            if share is not None:
                return render(request, "share_group.html", view=share, choices=resets.CHOICES, plan=p, done=done,
                              form=form)
        view = await service.group(group_id)
        return render(request, "group.html", view=view, choices=resets.CHOICES, plan=p, done=done, form=form)

    async def live(request: Request) -> Response:
        return JSONResponse(await state["live"].rates())

    registry = RegistryView(settings.schema_registry_url) if settings.schema_registry_url else None

    async def subjects(request: Request, service: ClusterService) -> Response:
        if registry is None:
            raise ConsoleError("No schema registry: start the console with --schema-registry-url.", 404)
        return render(request, "subjects.html", **await registry.subjects())

    async def subject(request: Request, service: ClusterService) -> Response:
        if registry is None:
            raise ConsoleError("No schema registry: start the console with --schema-registry-url.", 404)
        return render(request, "subject.html", **await registry.subject(request.path_params["subject"],
                                                                           request.query_params.get("version")))

    async def not_found(request: Request, exc: Exception) -> Response:
        return render(request, "error.html", 404, title="Not found", message=f"There is no page at {request.url.path}.")

    routes = [
        Route("/", page(cluster)),
        Route("/topics", page(topics)),
        Route("/topics", page(create_topic, changes=True), methods=["POST"]),
        Route("/topics/{name}", page(topic)),
        Route("/topics/{name}/partitions", page(add_partitions, changes=True), methods=["POST"]),
        Route("/topics/{name}/delete", page(confirm_delete)),
        Route("/topics/{name}/delete", page(delete_topic, changes=True), methods=["POST"]),
        Route("/topics/{name}/messages", page(messages)),
        Route("/groups", page(groups)),
        Route("/groups/{group}", page(group)),
        Route("/groups/{group}/reset", page(reset_group, changes=True), methods=["POST"]),
        Route("/schemas", page(subjects)),
        Route("/schemas/{subject}", page(subject)),
        Route("/api/live", live),
    ]
    return Starlette(routes=routes, lifespan=lifespan, exception_handlers={404: not_found})


def _kafka_message(e: errors.KafkaError) -> str:
    return str(e.args[0]) if e.args and e.args[0] else e.name


def _int(raw: Any, what: str, default: int | None = None) -> int:
    text = str(raw or "").strip()
    if not text and default is not None:
        return default
    try:
        return int(text)
    except ValueError:
        raise ConsoleError(f"{what} must be a whole number, not '{text}'.") from None


def _properties(text: str) -> dict[str, str]:
    """``key=value`` lines (topic configs in the create form)."""
    out = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise ConsoleError(f"Configs are key=value lines: '{line}' has no '='.")
        key, value = line.split("=", 1)
        out[key.strip()] = value.strip()
    return out
