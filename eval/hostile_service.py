"""Hostile use of `retrieval serve`: other web pages, other host names, server paths, unbounded work,
and the index going away while it is served (issue 49).

Each case starts the service (in this process, on a free loopback port) over a
copy of a small index, sends what a hostile page or client would, and checks
the outcome as eval/hostile_fs.py does: "error" (the expected 4xx or 503 with a
JSON one-line error, and nothing harmed: the index byte for byte as before),
"fine" (200 and the right result), or a bug: "traceback" (a 5xx other than
503, a body that is not a JSON error, or a traceback in the server's log),
"silent" (accepted when it should be refused, or the index changed), "hang"
(no answer in time). eval/reliability.py tallies them;
tests/test_reliability_hostile_service.py asserts every case gets what it expects.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import logging
import random
import shutil
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
for _path in (ROOT, ROOT / "eval"):
    if str(_path) not in sys.path:
        sys.path.insert(0, str(_path))

from hostile_fs import outcome, print_cases, tally  # noqa: E402,F401

from retrieval.index.native import build_index  # noqa: E402
from retrieval.storage import MANIFEST  # noqa: E402
from retrieval.types import Document  # noqa: E402

Result = tuple[int, str, bool]  # as hostile_fs: exit-code-like, message, nothing harmed / right result
JSON = {"Content-Type": "application/json"}
EVIL = "http://evil.example"
WORDS = [f"w{i}" for i in range(2000)] + ["cats", "dogs", "gardens", "retrieval"]
REQUEST_SECONDS = 120  # an answer later than this is a hang


class Fixture:
    """A small index under `root`: 300 documents of 150 words (enough that late interaction,
    encoding documents on the fly, takes seconds per stage)."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)
        rng = random.Random(0)
        docs = [Document(f"d{i:04d}", "", " ".join(rng.choice(WORDS) for _ in range(150)))
                for i in range(300)]
        self.index = root / "index"
        build_index(docs, self.index, progress=False)
        self.n = 0

    def copy(self, dense: bool = False) -> Path:
        """A private copy of the index (`dense`: of a 20-document one with a dense part)."""
        self.n += 1
        target = self.root / f"case-{self.n:03d}"
        shutil.copytree(self.dense_index() if dense else self.index, target)
        return target

    def dense_index(self) -> Path:
        """20 short documents with a dense part (the default encoder), built on first use."""
        from retrieval.dense import add_dense

        path = self.root / "dense-index"
        if not path.exists():
            docs = [Document(f"p{i}", "", f"passage {i} about cats and gardens") for i in range(20)]
            build_index(docs, path, progress=False)
            add_dense(path)
        return path


class LogCapture(logging.Handler):
    """Records the server's log lines that carry a traceback (an exception escaped the app)."""

    def __init__(self) -> None:
        super().__init__()
        self.tracebacks: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        if record.exc_info or "Exception in ASGI" in record.getMessage():
            self.tracebacks.append(record.getMessage())


@contextlib.contextmanager
def serving(index: Path, **options: Any) -> Iterator[tuple[int, LogCapture]]:
    """The service over `index` on a free loopback port, in a thread; yields (port, its log)."""
    import uvicorn

    from retrieval.service.app import create_app
    from retrieval.service.engine import Engine

    engine_options = {k: options.pop(k) for k in ("late_model",) if k in options}
    app = create_app(Engine(index, **engine_options), **options)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    log = LogCapture()
    loggers = [logging.getLogger(n) for n in ("uvicorn.error", "uvicorn", "fastapi")]
    for logger in loggers:
        logger.addHandler(log)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    try:
        while not server.started:
            if time.time() > deadline or not thread.is_alive():
                raise RuntimeError("the server did not start")
            time.sleep(0.02)
        yield server.servers[0].sockets[0].getsockname()[1], log
    finally:
        server.should_exit = True
        thread.join(timeout=60)
        for logger in loggers:
            logger.removeHandler(log)


def send(port: int, method: str, path: str, body: bytes | dict | list | None = None,
         headers: dict[str, str] | None = None) -> tuple[int, bytes]:
    """(status, raw body) of one request; TimeoutError if it takes longer than REQUEST_SECONDS."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=REQUEST_SECONDS)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    try:
        conn.request(method, path, body=data, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.read()
    except TimeoutError:
        raise TimeoutError(f"no answer to {method} {path} in {REQUEST_SECONDS} s") from None
    finally:
        conn.close()


def error_line(status: int, raw: bytes) -> str | None:
    """The one-line JSON error of a refusal, or None if the body is not one."""
    try:
        error = json.loads(raw).get("error")
    except (ValueError, AttributeError):
        return None
    return error if isinstance(error, str) and error and "\n" not in error else None


def judged(status: int, raw: bytes, refused: tuple[int, ...], harmless: bool, log: LogCapture,
           right: bool = True) -> Result:
    """A reply as a Result: a clean refusal with one of the `refused` statuses is (2, its line); a
    200 is (0, ""); anything else, or a traceback in the log, is reported as one."""
    if log.tracebacks:
        return 1, f"Traceback in the server log: {log.tracebacks[0][:200]}", False
    line = error_line(status, raw)
    if (status >= 500 and status != 503) or (status >= 400 and line is None):
        return 1, f"Traceback-like answer: {status} {raw[:200]!r}", False
    if status == 200:
        return 0, "", harmless and right
    return 2, f"retrieval: error: {line}\n", harmless and status in refused


def manifest_bytes(index: Path) -> bytes:
    return (index / MANIFEST).read_bytes()


# ---------------------------------------------------------------- 1. writes and reads from other origins

def write_from(headers: dict[str, str], body: bytes, path: str = "/api/documents",
               refused: tuple[int, ...] = (403, 415), **options: Any) -> Callable[[Fixture], Result]:
    """A write as another origin's page sends it: refused, and the index exactly as before."""
    def case(fx: Fixture) -> Result:
        index = fx.copy()
        before = manifest_bytes(index)
        with serving(index, **options) as (port, log):
            status, raw = send(port, "POST", path, body, headers)
            return judged(status, raw, refused, manifest_bytes(index) == before, log)
    return case


def write_accepted(headers: dict[str, str], own_origin: bool = False) -> Callable[[Fixture], Result]:
    """A JSON write from the page itself (`own_origin`) or a client that is not a browser: done."""
    def case(fx: Fixture) -> Result:
        index = fx.copy()
        with serving(index) as (port, log):
            extra = ({"Origin": f"http://127.0.0.1:{port}", "Sec-Fetch-Site": "same-origin"} if own_origin
                     else {})
            status, raw = send(port, "POST", "/api/documents",
                               {"documents": [{"id": "new-1", "text": "cats in gardens"}]}, headers | extra)
            status2, raw2 = send(port, "POST", "/api/search", {"query": "cats gardens", "k": 300},
                                 JSON | extra)
            found = status2 == 200 and "new-1" in {r["id"] for r in json.loads(raw2)["results"]}
            return judged(status, raw, (), True, log, right=found)
    return case


NO_CORS = {"Content-Type": "text/plain;charset=UTF-8", "Origin": EVIL, "Sec-Fetch-Site": "cross-site",
           "Sec-Fetch-Mode": "no-cors"}
TEXT_FORM = b'{"documents": [{"id": "evil", "text": "x=' + b'"}]}\r\n'  # <form enctype=text/plain>
SAME_ORIGIN_CASES: list[tuple[str, Callable[[Fixture], Result], str]] = [
    ("no-cors fetch, text/plain delete", write_from(NO_CORS, b'{"ids": ["d0005"]}', "/api/documents/delete"),
     "error"),
    ("text/plain <form> add, no JavaScript", write_from({"Content-Type": "text/plain", "Origin": EVIL},
                                                        TEXT_FORM), "error"),
    ("text/plain add, no Origin", write_from({"Content-Type": "text/plain"}, TEXT_FORM), "error"),
    ("urlencoded <form> add", write_from({"Content-Type": "application/x-www-form-urlencoded"},
                                         b"documents=x"), "error"),
    ("multipart <form> add", write_from({"Content-Type": "multipart/form-data; boundary=x"},
                                        b"--x\r\n\r\n{}\r\n--x--\r\n"), "error"),
    ("untyped body", write_from({}, b'{"ids": ["d0005"]}', "/api/documents/delete"), "error"),
    ("JSON from another Origin", write_from(JSON | {"Origin": EVIL}, b'{"ids": ["d0005"]}',
                                           "/api/documents/delete"), "error"),
    ("JSON, Referer of another origin", write_from(JSON | {"Referer": EVIL + "/page"}, b'{"ids": ["d0005"]}',
                                                   "/api/documents/delete"), "error"),
    ("JSON, Origin: null (sandboxed page)", write_from(JSON | {"Origin": "null"}, b'{"ids": ["d0005"]}',
                                                       "/api/documents/delete"), "error"),
    ("JSON, Sec-Fetch-Site: same-site (another port)",
     write_from(JSON | {"Sec-Fetch-Site": "same-site"}, b'{"ids": ["d0005"]}', "/api/documents/delete"),
     "error"),
    ("text/plain search (a read)", write_from({"Content-Type": "text/plain"}, b'{"query": "cats"}',
                                               "/api/search", (415,)), "error"),
    ("the token still guards writes", write_from(JSON, b'{"ids": ["d0005"]}', "/api/documents/delete", (401,),
                                                 token="s3cret"), "error"),
    ("the page's own JSON write", write_accepted(JSON, own_origin=True), "fine"),
    ("a JSON client (no Origin)", write_accepted(JSON), "fine"),
    ("application/json; charset=utf-8", write_accepted({"Content-Type": "application/json; charset=utf-8"}),
     "fine"),
]


# ---------------------------------------------------------------- 2. the Host header (DNS rebinding)

def host_case(host: str | None, method: str = "GET", path: str = "/api/info",
              **options: Any) -> Callable[[Fixture], Result]:
    """A request addressed to `host` (None: no Host header at all)."""
    def case(fx: Fixture) -> Result:
        index = fx.copy()
        with serving(index, **options) as (port, log):
            if host is None:
                return _without_host(port, log)
            name = host.replace("PORT", str(port))
            body = {"query": "cats"} if method == "POST" else None
            status, raw = send(port, method, path, body, {"Host": name} | (JSON if body else {}))
            right = status != 200 or (b'"index"' in raw or b'"results"' in raw)
            return judged(status, raw, (400, 421), True, log, right)
    return case


def _without_host(port: int, log: LogCapture) -> Result:
    """An HTTP/1.0 request without a Host header."""
    with socket.create_connection(("127.0.0.1", port), timeout=REQUEST_SECONDS) as s:
        s.sendall(b"GET /api/info HTTP/1.0\r\n\r\n")
        data = b""
        while chunk := s.recv(65536):
            data += chunk
    head, _, raw = data.partition(b"\r\n\r\n")
    return judged(int(head.split()[1]), raw, (400, 421), True, log)


HOST_CASES: list[tuple[str, Callable[[Fixture], Result], str]] = [
    ("GET /api/info, Host attacker.example", host_case("attacker.example"), "error"),
    ("POST search, Host attacker.example:PORT", host_case("attacker.example:PORT", "POST", "/api/search"),
     "error"),
    ("Host 127.0.0.1.attacker.example", host_case("127.0.0.1.attacker.example:PORT"), "error"),
    ("Host localhost.attacker.example", host_case("localhost.attacker.example"), "error"),
    ("GET / (the page), Host attacker.example", host_case("attacker.example", path="/"), "error"),
    ("no Host header (HTTP/1.0)", host_case(None), "error"),
    ("Host 127.0.0.1:PORT", host_case("127.0.0.1:PORT"), "fine"),
    ("Host localhost:PORT", host_case("localhost:PORT"), "fine"),
    ("Host [::1]:PORT", host_case("[::1]:PORT"), "fine"),
    ("Host search.example with --allowed-host", host_case("search.example:PORT", allowed=["search.example"]),
     "fine"),
]


# ---------------------------------------------------------------- 3. no server paths in requests

def named_paths(model: str, key: str, values: list[Any]) -> Callable[[Fixture], Result]:
    """Stages naming server paths (some existing, some not): every one refused with the same line,
    so the answers tell nothing about the server's files (the index has the dense part those
    stages search)."""
    def case(fx: Fixture) -> Result:
        index = fx.copy(dense=model in ("dense", "hybrid"))
        with serving(index) as (port, log):
            answers = []
            for value in values:
                named = value.replace("INDEX", str(index)) if isinstance(value, str) else value
                stage = {"model": model, key: named}
                pipeline = [{"model": "bm25", "cutoff": 10}, stage] if model == "late" else stage
                body = {"query": "cats", "pipeline": pipeline}
                answers.append(send(port, "POST", "/api/search", body, JSON))
            results = [judged(s, raw, (400,), True, log) for s, raw in answers]
            lines = {err for _, err, _ in results}
            worst = next((r for r in results if r[0] != 2 or not r[2]), results[0])
            return worst[0], worst[1], worst[2] and len(lines) == 1 and str(index) not in next(iter(lines))
    return case


PATH_CASES: list[tuple[str, Callable[[Fixture], Result], str]] = [
    ("late checkpoint: an existing file, a missing one, ../..",
     named_paths("late", "checkpoint", ["INDEX/manifest.json", "INDEX/nothing.safetensors", "../../../..",
                                        "/etc/passwd"]), "error"),
    ("dense encoder: an existing directory, a missing one",
     named_paths("dense", "encoder", ["INDEX", "INDEX/no-such-model", "../../../..", "/"]), "error"),
    ("hybrid encoder", named_paths("hybrid", "encoder", ["INDEX", "/nonexistent"]), "error"),
    ("threads (a server setting)", named_paths("bm25", "threads", [64]), "error"),
]


# ---------------------------------------------------------------- 4. bounded work

def limited(pipeline: Any, seconds: float = 10.0, dense: bool = False, **body: Any
            ) -> Callable[[Fixture], Result]:
    """A search asking for more work than a request may: refused at once (within `seconds`)."""
    def case(fx: Fixture) -> Result:
        index = fx.copy(dense)
        with serving(index) as (port, log):
            start = time.monotonic()
            request = {"query": "cats dogs", "pipeline": pipeline} | body
            status, raw = send(port, "POST", "/api/search", request, JSON)
            return judged(status, raw, (400, 413), time.monotonic() - start < seconds, log)
    return case


QUERY = "cats dogs gardens retrieval " + " ".join(WORDS[:40])  # matches nearly every document


def stage_seconds(index: Path) -> float:
    """How long one late stage of 40 documents takes here now (the model loaded first)."""
    from retrieval.service.engine import Engine

    engine = Engine(index)
    engine.search(QUERY, [{"model": "bm25", "cutoff": 5}, {"model": "late", "depth": 5}])
    start = time.monotonic()
    engine.search(QUERY, [{"model": "bm25", "cutoff": 200},
                          {"model": "late", "depth": 40, "interpolate": 0.05}])
    return time.monotonic() - start


def engine_free(port: int, start: float) -> float:
    """Seconds from `start` until /api/info gets the engine (a 200; a 503 is a wait past its limit)."""
    while send(port, "GET", "/api/info")[0] != 200 and time.monotonic() - start < REQUEST_SECONDS:
        pass
    return time.monotonic() - start


def deadline_stops_the_work(fx: Fixture) -> Result:
    """Seven late-interaction stages of 40 documents (encoded on the fly: a few seconds each) on a
    server with a 1 s time limit: 503 at the limit, and requests sent meanwhile get the engine (a
    200) once the stage running then is done, within three stages' time, not after all seven
    (until then each waits its own 1 s and gets a 503). A stage's time is measured first, so the
    verdict holds however loaded the machine is."""
    index = fx.copy()
    stage = stage_seconds(index)
    with serving(index, time_limit=1.0) as (port, log):
        warm = [{"model": "bm25", "cutoff": 5}, {"model": "late", "depth": 5}]  # loads the late model
        send(port, "POST", "/api/search", {"query": QUERY, "pipeline": warm}, JSON)
        engine_free(port, time.monotonic())
        stages = [{"model": "bm25", "cutoff": 200}] + [{"model": "late", "depth": 40, "interpolate": i / 10}
                                                       for i in range(1, 8)]
        start, answer = time.monotonic(), {}

        def slow() -> None:
            answer["reply"] = send(port, "POST", "/api/search", {"query": QUERY, "pipeline": stages}, JSON)
            answer["seconds"] = time.monotonic() - start
        thread = threading.Thread(target=slow)
        thread.start()
        time.sleep(1.5)
        freed = engine_free(port, start)
        thread.join(REQUEST_SECONDS)
        if "reply" not in answer:
            raise TimeoutError("the slow search was never answered")
        prompt = answer["seconds"] < 1 + stage + 1
        return judged(*answer["reply"], (503,), prompt and freed < 1.5 + 3 * stage, log)


LIMIT_CASES: list[tuple[str, Callable[[Fixture], Result], str]] = [
    ("9 stages", limited(["bm25"] + ["qld"] * 8), "error"),
    ("300 qld stages (9 KB)", limited(["bm25"] + [{"model": "qld", "mu": 1000 + i} for i in range(299)]),
     "error"),
    ("late depth 100,000", limited([{"model": "bm25", "cutoff": 10}, {"model": "late", "depth": 100_000}]),
     "error"),
    ("late depth 201", limited([{"model": "bm25", "cutoff": 10}, {"model": "late", "depth": 201}]), "error"),
    ("hits 10^6", limited({"model": "bm25", "hits": 1_000_000}), "error"),
    ("cutoff 10^6", limited([{"model": "bm25", "cutoff": 1_000_000}, "qld"]), "error"),
    ("hybrid depth 10^6", limited({"model": "hybrid", "depth": 1_000_000}, dense=True), "error"),
    ("rm3 fb_docs 10^6", limited({"model": "bm25", "rm3": True, "fb_docs": 1_000_000}), "error"),
    ("k 10^6", limited("bm25", k=1_000_000), "error"),
    ("deadline: work stops at the next stage", deadline_stops_the_work, "error"),
]


# ---------------------------------------------------------------- 5. the index going away

def index_gone(how: str) -> Callable[[Fixture], Result]:
    """The served index deleted, moved away or damaged: a JSON 503, then the server serves again."""
    def case(fx: Fixture) -> Result:
        index = fx.copy()
        with serving(index) as (port, log):
            send(port, "POST", "/api/search", {"query": "cats"}, JSON)
            away = index.with_name(index.name + "-away")
            if how == "deleted":
                shutil.rmtree(index)
            elif how == "moved away":
                index.rename(away)
            else:
                (index / MANIFEST).write_text("{not json")
            results = [judged(*send(port, "GET", "/api/info"), (503,), True, log),
                       judged(*send(port, "POST", "/api/search", {"query": "cats"}, JSON), (503,), True, log)]
            if how == "moved away":  # put back: served again
                away.rename(index)
                back = judged(*send(port, "GET", "/api/info"), (), True, log)
                results.append((2, results[0][1], back[0] == 0 and back[2]))
            worst = next((r for r in results if r[0] != 2 or not r[2]), results[0])
            return worst
    return case


def disconnect_mid_upload(fx: Fixture) -> Result:
    """A client that sends half an upload and goes away: no traceback in the log, nothing written,
    and the server answers the next request."""
    index = fx.copy()
    before = manifest_bytes(index)
    with serving(index) as (port, log):
        with socket.create_connection(("127.0.0.1", port)) as s:
            s.sendall(f"POST /api/documents HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type:"
                      f" application/json\r\nContent-Length: 100000\r\n\r\n".encode()
                      + b'{"documents": [{"id": "half", "text": "')
            time.sleep(0.3)
        time.sleep(0.5)
        status, raw = send(port, "GET", "/api/info")
        return judged(status, raw, (), manifest_bytes(index) == before, log)


GONE_CASES: list[tuple[str, Callable[[Fixture], Result], str]] = [
    ("index deleted while served", index_gone("deleted"), "error"),
    ("index moved away (being replaced), then back", index_gone("moved away"), "error"),
    ("manifest damaged while served", index_gone("damaged"), "error"),
    ("client disconnects mid-upload", disconnect_mid_upload, "fine"),
]

CASES: list[tuple[str, str, Callable[[Fixture], Result], str]] = [
    *[("service: same origin", name, case, expected) for name, case, expected in SAME_ORIGIN_CASES],
    *[("service: Host", name, case, expected) for name, case, expected in HOST_CASES],
    *[("service: no paths", name, case, expected) for name, case, expected in PATH_CASES],
    *[("service: limits", name, case, expected) for name, case, expected in LIMIT_CASES],
    *[("service: index away", name, case, expected) for name, case, expected in GONE_CASES],
]


def run_cases(workdir: Path) -> list[tuple[str, str, str]]:
    """(category, case, outcome) for every case."""
    fx = Fixture(Path(workdir))
    return tally(CASES, lambda _, case: case(fx))


if __name__ == "__main__":
    print_cases(run_cases)
