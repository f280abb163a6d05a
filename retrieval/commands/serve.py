"""`retrieval serve`: the HTTP JSON API and search page over one index (retrieval.service)."""

from __future__ import annotations

import argparse
import ipaddress
import os
import secrets
import socket
import sys
from pathlib import Path

from retrieval.commands.common import number, precision_flag, threads_flag
from retrieval.errors import InputError

TOKEN_ENV = "RETRIEVAL_TOKEN"


def add(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("serve", help="serve an index over HTTP (JSON API and a search page)",
                       description="Serve an index over HTTP: a JSON API (search with any registered "
                       "pipeline, rerank a posted candidate list, ask a question, add and delete "
                       "documents, index info) and a search page at /. Listens on 127.0.0.1 by "
                       "default; bound elsewhere, writes need a token (--token, $RETRIEVAL_TOKEN, or "
                       "one made up and printed at start). It answers only requests addressed to it "
                       "(the Host header: the address it listens on, localhost, or --allowed-host) and, "
                       "from browsers, only its own page; requests name no file of the server (models "
                       "are chosen here, at start).")
    p.add_argument("--index", required=True, type=Path, help="index to serve")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    p.add_argument("--port", type=number(int, 1, 65535), default=8000, help="port (default 8000)")
    p.add_argument("--token", default=None,
                   help=f"bearer token for writes (default ${TOKEN_ENV}; none needed on loopback)")
    p.add_argument("--time-limit", type=number(float, 0, above=True), default=30.0,
                   help="seconds per request (default 30)")
    p.add_argument("--max-body", type=number(), default=1 << 20,
                   help="bytes per request body (default 1 MiB)")
    p.add_argument("--allowed-host", action="append", default=[], metavar="NAME",
                   help="another host name requests may be addressed to (repeatable), e.g. the "
                   "machine's name when it listens beyond loopback")
    p.add_argument("--reader", type=Path, default=None, help="QA reader (default: the committed one, "
                   "retrieval/models/reader, shipped in the package)")
    p.add_argument("--late-model", type=Path, default=None,
                   help="checkpoint late-interaction stages use (default: the shipped one)")
    precision_flag(p, "how neural stages encode")
    threads_flag(p, "threads per search")
    p.set_defaults(handler=run)


def loopback(host: str) -> bool:
    """Whether `host` is a loopback address (or localhost)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def write_token(host: str, given: str | None) -> str | None:
    """The token writes need: the given one, else none on loopback, else a new random one."""
    token = given or os.environ.get(TOKEN_ENV) or None
    if token is None and not loopback(host):
        token = secrets.token_urlsafe(24)
        print(f"retrieval serve: writes need 'Authorization: Bearer {token}'", file=sys.stderr)
    return token


def check_listenable(host: str, port: int) -> None:
    """InputError, before the server is announced, if it could not listen at host:port (a port in
    use, an address this machine does not have); the server binds the same way (SO_REUSEADDR)."""
    try:
        family, kind, _, _, address = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)[0]
        with socket.socket(family, kind) as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind(address)
    except OSError as e:
        raise InputError(f"cannot listen on {host}:{port} ({e.strerror or e})") from None


def check_models(args: argparse.Namespace) -> None:
    """Refuse, before the server starts, a --reader or --late-model that is not there (they are
    loaded on the first request that needs them)."""
    if args.reader is not None:
        from retrieval.qa.reader import check_reader_dir

        check_reader_dir(args.reader)
    if args.late_model is not None:
        from retrieval.late.model import ZERO_SHOT, load_head

        if str(args.late_model) != ZERO_SHOT:
            load_head(args.late_model)


def run(args: argparse.Namespace) -> None:
    import uvicorn

    from retrieval.index.kinds import open_index
    from retrieval.service.app import create_app
    from retrieval.service.engine import Engine

    open_index(args.index)  # a missing or foreign index is refused before the server starts
    check_models(args)
    check_listenable(args.host, args.port)
    engine = Engine(args.index, precision=args.precision, threads=args.threads, reader=args.reader,
                    late_model=args.late_model)
    app = create_app(engine, write_token(args.host, args.token), args.max_body, args.time_limit,
                     host=args.host, allowed=args.allowed_host)
    print(f"retrieval serve: {args.index} on http://{args.host}:{args.port}/", file=sys.stderr)
    # uvicorn.Server, not uvicorn.run: run() swallows the KeyboardInterrupt that the SIGTERM (or Ctrl-C)
    # it re-raises after a graceful shutdown becomes, so `kill` would end the command with status 0;
    # this way cli.main reports it as for any command ("retrieval: terminated", 143; Ctrl-C 130).
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="warning"))
    server.run()
    if not server.started:
        raise InputError(f"the server could not start on {args.host}:{args.port}")
