"""Kafka Connect's REST API (same paths, JSON and error JSON) on Starlette, served by uvicorn.

Endpoints are plain functions: Starlette runs them in its thread pool, since a herder call
may wait on the brokers. A call the herder says another worker must serve
(:class:`RequestTargetException`: a write on a follower) is forwarded to that worker's URL
with ``?forward=`` as Kafka does: at most two hops, then 409.
"""

from __future__ import annotations

import json
import logging
from typing import Any, Callable
from urllib.parse import urlencode, urlparse

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from samsa.connect import plugins, rest_client
from samsa.connect.errors import (BadRequestException, ConflictException, ConnectException, ConnectRestException,
                                  NotFoundException, RequestTargetException)
from samsa.connect.herder import Herder

log = logging.getLogger(__name__)


def error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error_code": status, "message": message}, status_code=status)


SIGNATURE_HEADER = "X-Connect-Authorization"  # requests between workers (KIP-507)
SIGNATURE_ALGORITHM_HEADER = "X-Connect-Request-Signature-Algorithm"


def _status_of(e: BaseException) -> int:
    if isinstance(e, ConnectRestException):
        return e.status
    if isinstance(e, NotFoundException):
        return 404
    if isinstance(e, ConflictException):
        return 409
    if isinstance(e, (BadRequestException, ConnectException, ValueError)):
        return 400
    return 500


def _handled(fn: Callable[..., Response]) -> Callable[[Request], Any]:
    async def endpoint(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool
        body: Any = None
        if request.method in ("POST", "PUT", "PATCH"):
            raw = await request.body()
            request.state.raw_body = raw
            if raw:
                try:
                    body = json.loads(raw)
                except ValueError as e:
                    return error(400, f"Unrecognized token in request body: {e}")
        try:
            return await run_in_threadpool(fn, request, body)
        except RequestTargetException as e:
            return await run_in_threadpool(_forward, request, body, e)
        except Exception as e:  # noqa: BLE001 - every failure answers Kafka's error JSON
            status = _status_of(e)
            if status == 500:
                log.exception("Uncaught exception in REST call to %s", request.url.path)
            return error(status, str(e))
    return endpoint


def _forward(request: Request, body: Any, target: RequestTargetException) -> Response:
    """Serve the request at the worker that must (the leader), as Kafka's HerderRequestHandler does."""
    forward = request.query_params.get("forward")
    if forward is not None and forward.lower() != "true":
        log.error("Request '%s %s' failed because it couldn't find the target Connect worker within two hops "
                  "(between workers).", request.method, request.url.path)
        return error(409, "Cannot complete request because of a conflicting operation (e.g. worker rebalance)")
    if target.forward_url is None:
        return error(409, "Cannot complete request momentarily due to no known leader URL, likely because a "
                          "rebalance was underway.")
    query = [(k, v) for k, v in request.query_params.multi_items() if k != "forward"]
    query.append(("forward", "true" if forward is None else "false"))
    url = target.forward_url.rstrip("/") + request.url.path + "?" + urlencode(query)
    log.debug("Forwarding request %s %s %s", url, request.method, body)
    signed = {h: request.headers[h] for h in (SIGNATURE_HEADER, SIGNATURE_ALGORITHM_HEADER) if h in request.headers}
    try:
        status, answer = rest_client.request(request.method, url, body, raw=getattr(request.state, "raw_body", None),
                                             headers=signed)
    except OSError as e:
        return error(500, f"IO Error trying to forward REST request: {e}")
    if answer is None:
        return Response(status_code=status)
    headers = {"Location": request.url.path} if status == 201 and request.method == "POST" else None
    if headers is not None and isinstance(answer, dict) and answer.get("name"):
        headers = {"Location": f"/connectors/{answer['name']}"}
    return JSONResponse(answer, status_code=status, headers=headers)


def _flag(request: Request, name: str) -> bool:
    return request.query_params.get(name, "false").lower() == "true"


def create_app(herder: Herder) -> Starlette:
    def root(request: Request, body: Any) -> Response:
        return JSONResponse(herder.server_info())

    def list_connectors(request: Request, body: Any) -> Response:
        names = herder.connectors()
        expand = request.query_params.getlist("expand")
        if not expand:
            return JSONResponse(names)
        out: dict[str, dict] = {}
        for name in names:
            entry: dict[str, Any] = {}
            if "status" in expand:
                entry["status"] = herder.connector_status(name)
            if "info" in expand:
                entry["info"] = herder.connector_info(name)
            out[name] = entry
        return JSONResponse(out)

    def create_connector(request: Request, body: Any) -> Response:
        if not isinstance(body, dict):
            raise BadRequestException("Request body must be a JSON object with \"name\" and \"config\"")
        name = body.get("name")
        config = body.get("config")
        if not isinstance(config, dict):
            raise BadRequestException("Connector config must be a JSON object: Missing config")
        if name is None:
            name = config.get("name")
        if not name or not str(name).strip():
            raise BadRequestException("Connector name must not be empty")
        name = str(name).strip()
        _, info = herder.put_connector_config(name, config, allow_replace=False)
        return JSONResponse(info, status_code=201, headers={"Location": f"/connectors/{name}"})

    def get_connector(request: Request, body: Any) -> Response:
        return JSONResponse(herder.connector_info(request.path_params["name"]))

    def get_config(request: Request, body: Any) -> Response:
        return JSONResponse(herder.connector_config(request.path_params["name"]))

    def put_config(request: Request, body: Any) -> Response:
        if not isinstance(body, dict):
            raise BadRequestException("Connector config must be a JSON object")
        created, info = herder.put_connector_config(request.path_params["name"], body, allow_replace=True)
        return JSONResponse(info, status_code=201 if created else 200)

    def status(request: Request, body: Any) -> Response:
        return JSONResponse(herder.connector_status(request.path_params["name"]))

    def restart(request: Request, body: Any) -> Response:
        include, only = _flag(request, "includeTasks"), _flag(request, "onlyFailed")
        result = herder.restart_connector(request.path_params["name"], include, only)
        if result is None:
            return Response(status_code=204)
        return JSONResponse(result, status_code=202)

    def pause(request: Request, body: Any) -> Response:
        herder.pause(request.path_params["name"])
        return Response(status_code=202)

    def resume(request: Request, body: Any) -> Response:
        herder.resume(request.path_params["name"])
        return Response(status_code=202)

    def stop(request: Request, body: Any) -> Response:
        herder.stop_connector(request.path_params["name"])
        return Response(status_code=204)

    def tasks(request: Request, body: Any) -> Response:
        return JSONResponse(herder.task_configs(request.path_params["name"]))

    def put_tasks(request: Request, body: Any) -> Response:
        if not isinstance(body, list) or not all(isinstance(c, dict) for c in body):
            raise BadRequestException("Task configs must be a JSON array of objects")
        signature = None
        if SIGNATURE_HEADER in request.headers:
            signature = (request.headers.get(SIGNATURE_ALGORITHM_HEADER, ""), request.headers[SIGNATURE_HEADER])
        herder.put_task_configs(request.path_params["name"], [{str(k): str(v) for k, v in c.items()} for c in body],
                                signature, request.state.raw_body)
        return Response(status_code=204)

    def task_id(request: Request) -> int:
        try:
            return int(request.path_params["task"])
        except ValueError:
            raise NotFoundException(f"Task {request.path_params['name']}-{request.path_params['task']} "
                                    f"not found") from None

    def task_status(request: Request, body: Any) -> Response:
        return JSONResponse(herder.task_status(request.path_params["name"], task_id(request)))

    def task_restart(request: Request, body: Any) -> Response:
        herder.restart_task(request.path_params["name"], task_id(request))
        return Response(status_code=204)

    def delete(request: Request, body: Any) -> Response:
        herder.delete_connector(request.path_params["name"])
        return Response(status_code=204)

    def get_offsets(request: Request, body: Any) -> Response:
        return JSONResponse(herder.offsets(request.path_params["name"]))

    def patch_offsets(request: Request, body: Any) -> Response:
        if not isinstance(body, dict) or not isinstance(body.get("offsets"), list):
            raise BadRequestException("Offsets must be specified and should not be empty")
        return JSONResponse({"message": herder.alter_offsets(request.path_params["name"], body["offsets"])})

    def delete_offsets(request: Request, body: Any) -> Response:
        return JSONResponse({"message": herder.alter_offsets(request.path_params["name"], None)})

    def list_plugins(request: Request, body: Any) -> Response:
        found = plugins.connector_plugins()
        if request.query_params.get("connectorsOnly", "true").lower() == "false":
            from samsa.connect.converters import ALIASES
            from samsa.connect.transforms import PREDICATES, TRANSFORMS
            found += [{"class": c, "type": "converter"} for c in ALIASES]
            found += [{"class": c, "type": "transformation"} for c in TRANSFORMS]
            found += [{"class": c, "type": "predicate"} for c in PREDICATES]
        return JSONResponse(found)

    def validate(request: Request, body: Any) -> Response:
        if not isinstance(body, dict):
            raise BadRequestException("Connector config must be a JSON object")
        plugin = request.path_params["plugin"]
        config = dict(body)
        given = config.get("connector.class")
        if given is None:
            config["connector.class"] = plugin
        else:
            try:
                same = plugins.connector_class(str(given)) is plugins.connector_class(plugin)
            except ConnectException:
                same = str(given) == plugin
            if not same:
                raise BadRequestException(f"Included connector type {given} does not match request type {plugin}")
        return JSONResponse(herder.validate(config))

    def connector_route(path: str, fn: Callable, methods: list[str]) -> Route:
        return Route("/connectors/{name}" + path, _handled(fn), methods=methods)

    async def not_found(request: Request, exc: HTTPException) -> Response:
        return error(exc.status_code, exc.detail if exc.status_code != 404 else "HTTP 404 Not Found")

    routes = [
        Route("/", _handled(root), methods=["GET"]),
        Route("/connectors", _handled(list_connectors), methods=["GET"]),
        Route("/connectors", _handled(create_connector), methods=["POST"]),
        connector_route("", get_connector, ["GET"]),
        connector_route("", delete, ["DELETE"]),
        connector_route("/config", get_config, ["GET"]),
        connector_route("/config", put_config, ["PUT"]),
        connector_route("/status", status, ["GET"]),
        connector_route("/restart", restart, ["POST"]),
        connector_route("/pause", pause, ["PUT"]),
        connector_route("/resume", resume, ["PUT"]),
        connector_route("/stop", stop, ["PUT"]),
        connector_route("/tasks", tasks, ["GET"]),
        connector_route("/tasks", put_tasks, ["PUT", "POST"]),
        connector_route("/tasks/{task}/status", task_status, ["GET"]),
        connector_route("/tasks/{task}/restart", task_restart, ["POST"]),
        connector_route("/offsets", get_offsets, ["GET"]),
        connector_route("/offsets", patch_offsets, ["PATCH"]),
        connector_route("/offsets", delete_offsets, ["DELETE"]),
        Route("/connector-plugins", _handled(list_plugins), methods=["GET"]),
        Route("/connector-plugins/{plugin}/config/validate", _handled(validate), methods=["PUT"]),
    ]
    return Starlette(routes=routes, exception_handlers={HTTPException: not_found})


def listener_address(listeners: str) -> tuple[str, int]:
    """``listeners=http://:8083`` → ("0.0.0.0", 8083); the first listener is served."""
    first = listeners.split(",")[0].strip()
    url = urlparse(first if "://" in first else "http://" + first)
    if url.scheme not in ("http", ""):
        raise ValueError(f"Invalid listener {first}: only http:// listeners are supported")
    return url.hostname or "0.0.0.0", url.port or 8083
