"""The HTTP JSON API and search page over an `Engine` (FastAPI, served by uvicorn).

    GET  /                      the search page (page.html)
    GET  /api/info              the index and the pipelines the page offers
    POST /api/search            {query, pipeline?, k?, include?, exclude?, filter?}
    POST /api/rerank            {query, candidates, pipeline?, k?, filter?}
    POST /api/ask               {question, passages?, top?}
    POST /api/documents         {documents: [{id, title?, text}]}        (write)
    POST /api/documents/delete  {ids: [...]}                              (write)

Bad requests get a 4xx with {"error": one line}: 400 for invalid input (or a
Host this server does not answer to), 401 for a write without the token, 403
for a request from another origin, 404/405 for unknown routes, 413 for a body
over the limit, 415 for a POST that is not application/json; 503 when a read
runs past the time limit (it stops at its next stage; writes run to the end)
or the index is missing or being replaced. Writes need `Authorization: Bearer
TOKEN` when the service was given a token (always when it listens beyond the
loopback address; see commands/serve.py). guard.py says who may call at all.
"""

from __future__ import annotations

import asyncio
import functools
import hmac
import json
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import anyio.to_thread
from fastapi import FastAPI, Request
from fastapi.responses import HTMLResponse, JSONResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from retrieval.errors import InputError
from retrieval.service.engine import Engine, TimeUp, Unavailable
from retrieval.service.guard import SameOriginGuard, allowed_hosts

PAGE = Path(__file__).with_name("page.html")
MAX_BODY = 1 << 20      # bytes per request
TIME_LIMIT = 30.0       # seconds per request

FIELDS = {  # endpoint -> (required fields, optional fields)
    "search": ({"query"}, {"pipeline", "k", "include", "exclude", "filter"}),
    "rerank": ({"query", "candidates"}, {"pipeline", "k", "filter"}),
    "ask": ({"question"}, {"passages", "top"}),
    "add": ({"documents"}, set()),
    "delete": ({"ids"}, set()),
}


class RequestError(Exception):
    """A request the service refuses, with its HTTP status."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status, self.message = status, message


def create_app(engine: Engine, token: str | None = None, max_body: int = MAX_BODY,
               time_limit: float = TIME_LIMIT, host: str = "127.0.0.1",
               allowed: Iterable[str] = ()) -> FastAPI:
    """The FastAPI application serving `engine`; `token` guards the write endpoints. It answers
    requests addressed to `host` (the address it listens on) or an `allowed` name, from its own
    origin (guard.py)."""
    app = FastAPI(title="retrieval", docs_url=None, redoc_url=None, openapi_url=None)
    app.add_middleware(SameOriginGuard, *allowed_hosts(host, allowed))

    @app.exception_handler(RequestError)
    async def refused(_: Request, e: RequestError) -> JSONResponse:
        return JSONResponse({"error": e.message}, status_code=e.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, e: StarletteHTTPException) -> JSONResponse:
        return JSONResponse({"error": str(e.detail)}, status_code=e.status_code)

    @app.exception_handler(Exception)
    async def failed(_: Request, e: Exception) -> JSONResponse:
        """A bug: one line to the client (the traceback still goes to the server's log)."""
        return JSONResponse({"error": f"internal error ({type(e).__name__})"}, status_code=500)

    async def body(request: Request, endpoint: str) -> dict[str, Any]:
        """The request's JSON object, size-limited and checked against the endpoint's fields."""
        declared = request.headers.get("content-length")
        if declared is not None and (not declared.isdigit() or int(declared) > max_body):
            raise RequestError(413, f"request body over {max_body} bytes")
        data = bytearray()
        try:
            async for chunk in request.stream():
                data += chunk
                if len(data) > max_body:
                    raise RequestError(413, f"request body over {max_body} bytes")
        except ClientDisconnect:  # nobody is left to answer; nothing was done
            raise RequestError(400, "the client went away before sending the whole body") from None
        try:
            value = json.loads(data)
        except (ValueError, UnicodeDecodeError) as e:
            raise RequestError(400, f"request body is not valid JSON ({e})") from None
        except RecursionError:
            raise RequestError(400, "request body nests too deeply") from None
        if not isinstance(value, dict):
            raise RequestError(400, "request body must be a JSON object")
        required, optional = FIELDS[endpoint]
        missing, unknown = required - value.keys(), value.keys() - required - optional
        if missing or unknown:
            raise RequestError(400, f"missing field(s) {sorted(missing)}" if missing else
                               f"unknown field(s) {sorted(unknown)}; expected {sorted(required | optional)}")
        return value

    async def call(fn: Any, limited: bool = True, **kwargs: Any) -> JSONResponse:
        """Run an engine call in a worker thread within the time limit (a write has none: it cannot
        be stopped half way, so a 503 would hide that it was applied); InputError -> 400. A read
        past its limit is answered 503 at once, and stops at its next stage (its deadline)."""
        try:
            if limited:  # answered at the limit; the worker stops at its next deadline check
                kwargs["deadline"] = time.monotonic() + time_limit
                work = anyio.to_thread.run_sync(functools.partial(fn, **kwargs), abandon_on_cancel=True)
                result = await asyncio.wait_for(work, time_limit)
            else:
                result = await run_in_threadpool(fn, **kwargs)
        except InputError as e:
            raise RequestError(400, e.message) from None
        except (asyncio.TimeoutError, TimeUp):
            raise RequestError(503, f"the request took longer than {time_limit:g} s") from None
        except Unavailable as e:
            raise RequestError(503, str(e)) from None
        return JSONResponse(result)

    def authorised(request: Request) -> None:
        if token is None:
            return
        scheme, _, given = request.headers.get("authorization", "").partition(" ")
        # the scheme is case-insensitive (RFC 9110 11.1); the token is compared in constant time
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), token.encode()):
            raise RequestError(401, "writes need the header 'Authorization: Bearer <token>'")

    @app.get("/", response_class=HTMLResponse)
    async def page() -> HTMLResponse:
        return HTMLResponse(PAGE.read_text(encoding="utf-8"))

    @app.get("/api/info")
    async def info() -> JSONResponse:
        return await call(engine.info)

    @app.post("/api/search")
    async def search(request: Request) -> JSONResponse:
        return await call(engine.search, **await body(request, "search"))

    @app.post("/api/rerank")
    async def rerank(request: Request) -> JSONResponse:
        return await call(engine.rerank, **await body(request, "rerank"))

    @app.post("/api/ask")
    async def ask(request: Request) -> JSONResponse:
        return await call(engine.ask, **await body(request, "ask"))

    @app.post("/api/documents")
    async def add(request: Request) -> JSONResponse:
        authorised(request)
        return await call(engine.add, limited=False, **await body(request, "add"))

    @app.post("/api/documents/delete")
    async def delete(request: Request) -> JSONResponse:
        authorised(request)
        return await call(engine.delete, limited=False, **await body(request, "delete"))

    return app
