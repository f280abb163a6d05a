"""Who may call the service: requests addressed to a host it answers to, from its own origin, in JSON.

A browser lets any web page send a request to 127.0.0.1 (a `no-cors` fetch, a
`<form>`), and a page whose domain name re-resolves to 127.0.0.1 (DNS
rebinding) can even read the answers. Three checks, before any endpoint runs,
close both:

- Host: the request's Host header must name this server (the bound address,
  `localhost`, the loopback addresses on a loopback bind, and any
  `--allowed-host`); a rebinding page's requests carry its own domain name.
  On a wildcard bind (0.0.0.0, ::) any IP address is answered too: a page can
  only send an address as Host by being loaded from that address itself.
- Origin: a request to the API that says where it comes from (Origin, else
  Referer, and the browser's Sec-Fetch-Site) must come from this server's own
  origin. Clients that are not browsers send none of these and pass.
- Content type: every POST must be `application/json`. A cross-origin page can
  send JSON only after a CORS preflight, which this server never answers; the
  types it can send without one (text/plain, forms) are refused.

Refusals are JSON `{"error": one line}`: 400 (Host), 403 (origin), 415 (type).
"""

from __future__ import annotations

import ipaddress
import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any
from urllib.parse import urlsplit

LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")
WILDCARDS = ("0.0.0.0", "::", "")
SAME_ORIGIN_FETCHES = ("same-origin", "none")  # Sec-Fetch-Site values of the page itself, or typed URLs

Scope = dict[str, Any]
ASGI = Callable[[Scope, Callable[[], Awaitable[dict]], Callable[[dict], Awaitable[None]]], Awaitable[None]]


def host_name(value: str) -> str | None:
    """The host of a Host header or URL netloc (`name[:port]`, `[v6][:port]`), lower-cased, or None."""
    value = value.strip().lower()
    if value.startswith("["):
        end = value.find("]")
        rest = value[end + 1:]
        if end < 0 or (rest and not (rest.startswith(":") and rest[1:].isdigit())):
            return None
        return value[1:end]
    name, _, port = value.partition(":")
    if not name or (port and not port.isdigit()) or ":" in port:
        return None
    return name


def is_address(name: str) -> bool:
    """Whether `name` is an IP address literal (not a domain name)."""
    try:
        ipaddress.ip_address(name)
    except ValueError:
        return False
    return True


def allowed_hosts(bound: str, extra: Iterable[str] = ()) -> tuple[frozenset[str], bool]:
    """The host names a server bound to `bound` answers to, and whether it answers any IP address
    (a wildcard bind, reached by any of the machine's addresses)."""
    bound = bound.strip("[]").lower()
    names = {bound, "localhost", *(h.strip("[]").lower() for h in extra)}
    if bound == "localhost" or (is_address(bound) and ipaddress.ip_address(bound).is_loopback):
        names.update(LOOPBACK_NAMES)
    return frozenset(names - {""}), bound in WILDCARDS


def refusal(method: str, path: str, headers: dict[str, str], hosts: frozenset[str],
            any_address: bool) -> tuple[int, str] | None:
    """(status, message) if the request must be refused before it reaches an endpoint, else None."""
    host = headers.get("host", "")
    name = host_name(host)
    if name is None or not (name in hosts or (any_address and is_address(name))):
        return 400, (f"Host {host!r} is not a name this server answers to (it answers to"
                     f" {', '.join(sorted(hosts))}); start it with --allowed-host NAME to add one")
    if path.startswith("/api/"):
        problem = cross_origin(headers, host)
        if problem:
            return 403, (f"{problem}; the API answers only its own page ({host}) and clients that are not"
                         " browsers")
    if method == "POST":
        kind = headers.get("content-type", "").split(";", 1)[0].strip().lower()
        if kind != "application/json":
            return 415, f"requests must be JSON (Content-Type: application/json), not {kind or 'untyped'}"
    return None


def cross_origin(headers: dict[str, str], host: str) -> str | None:
    """Why the request comes from another origin than `host`'s, or None."""
    fetch_site = headers.get("sec-fetch-site", "").strip().lower()
    if fetch_site and fetch_site not in SAME_ORIGIN_FETCHES:
        return f"a {fetch_site} request"
    origin = headers.get("origin")
    if origin is None and headers.get("referer"):
        origin = headers["referer"]
    if origin is None:
        return None
    parts = urlsplit(origin.strip())
    if parts.scheme not in ("http", "https") or parts.netloc.lower() != host.strip().lower():
        return f"a request from {origin.strip()[:100]!r}"
    return None


class SameOriginGuard:
    """ASGI middleware refusing what `refusal` refuses, with a JSON one-line error."""

    def __init__(self, app: ASGI, hosts: frozenset[str], any_address: bool = False):
        self.app, self.hosts, self.any_address = app, hosts, any_address

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refused = refusal(scope["method"], scope["path"], headers, self.hosts, self.any_address)
        if refused is None:
            await self.app(scope, receive, send)
            return
        status, message = refused
        body = json.dumps({"error": message}).encode()
        await send({"type": "http.response.start", "status": status,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
