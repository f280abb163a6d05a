"""`retrieval serve`: the JSON API, its limits and errors, the search page, and a bounded load test."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from retrieval import collections
from retrieval.commands.serve import loopback, write_token
from retrieval.errors import InputError
from retrieval.formats.trec import format_run
from retrieval.index.kinds import open_index
from retrieval.index.native import build_index
from retrieval.registry import build
from retrieval.service.app import create_app
from retrieval.service.engine import Engine
from retrieval.service.load import MALFORMED, run_load
from retrieval.types import Document, Run


@contextlib.contextmanager
def serving(index: Path, record: list | None = None, **options):
    """A uvicorn server for `index` on a free loopback port, in a thread; yields the port.
    `record` gets (method, path, status) of every request answered."""
    import uvicorn

    app = create_app(Engine(index), **options)
    if record is not None:
        app = recording(app, record)
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 60
    while not server.started:
        assert time.time() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.05)
    try:
        yield server.servers[0].sockets[0].getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=30)


def recording(app, record: list):
    """`app` with (method, path, status) of each HTTP response appended to `record`."""
    async def recorded(scope, receive, send):
        async def sending(message):
            if message["type"] == "http.response.start":
                record.append((scope["method"], scope["path"], message["status"]))
            await send(message)
        await app(scope, receive, sending if scope["type"] == "http" else send)
    return recorded


def call(port: int, method: str, path: str, body=None, headers=None) -> tuple[int, dict]:
    """(status, JSON or {"html": page}) of one request; a POST body is sent as JSON (as a client
    must: the service refuses other types) unless `headers` say otherwise."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    data = body if isinstance(body, bytes) or body is None else json.dumps(body).encode()
    headers = ({"Content-Type": "application/json"} if method == "POST" else {}) | (headers or {})
    conn.request(method, path, body=data, headers=headers)
    response = conn.getresponse()
    raw = response.read()
    conn.close()
    return response.status, (json.loads(raw) if raw.startswith(b"{") else {"html": raw.decode()})


@pytest.fixture(scope="module")
def cacm_docs():
    return list(collections.load_documents("cacm"))


@pytest.fixture()
def cacm_copy(cacm_index, tmp_path) -> Path:
    """A private copy of the CACM index (updates change it)."""
    target = tmp_path / "cacm"
    shutil.copytree(cacm_index.path, target)
    return target


def test_search_filters_and_rerank_match_the_library(cacm_copy):
    topics = collections.load_topics("cacm")
    query = topics["10"]
    reference = build("bm25", open_index(cacm_copy), hits=3204)({"q": query})["q"]
    with serving(cacm_copy) as port:
        status, reply = call(port, "POST", "/api/search", {"query": query, "k": 10})
        assert status == 200
        assert [(r["id"], r["score"]) for r in reply["results"]] == [tuple(x) for x in reference[:10]]
        top = reply["results"][0]
        assert top["highlights"] and all(0 <= a < b <= len(top["snippet"]) for a, b in top["highlights"])
        # exclude: the exact top 10 of the rest; include: ranks beyond the first stage's default depth
        excluded = [d for d, _ in reference[:5]]
        _, reply = call(port, "POST", "/api/search", {"query": query, "k": 10, "exclude": excluded})
        assert [r["id"] for r in reply["results"]] == [d for d, _ in reference[5:15]]
        allowed = [d for d, _ in reference[-3:]] + [d for d, _ in reference[1500:1502]]
        _, reply = call(port, "POST", "/api/search", {"query": query, "k": 3, "include": allowed})
        assert [r["id"] for r in reply["results"]] == [d for d, _ in reference if d in set(allowed)][:3]
        # a metadata filter, inside the first stage's top k, with an exclude list
        index = open_index(cacm_copy)
        late = [d for d, _ in reference if (index.docstore.get(d).metadata or {}).get("year", 0) >= 1975]
        _, reply = call(port, "POST", "/api/search", {"query": query, "k": 5, "filter": "year >= 1975",
                                                      "exclude": late[:2]})
        assert [r["id"] for r in reply["results"]] == late[2:7]
        status, reply = call(port, "POST", "/api/search", {"query": query, "filter": "year >="})
        assert status == 400 and "filter" in reply["error"]
        # a reranking pipeline: the cut applies after filtering
        pipeline = [{"model": "bm25", "cutoff": 20}, "qld"]
        _, reply = call(port, "POST", "/api/search", {"query": query, "k": 5, "pipeline": pipeline,
                                                      "exclude": excluded})
        candidates = Run({"q": [x for x in reference if x[0] not in set(excluded)][:20]})
        expected = build("qld", open_index(cacm_copy))({"q": query}, candidates)["q"][:5]
        assert [(r["id"], r["score"]) for r in reply["results"]] == [tuple(x) for x in expected]
        status, reply = call(port, "POST", "/api/rerank", {"query": query, "pipeline": "qld",
                                                           "candidates": [d for d, _ in reference[:30]]})
        full = build("qld", open_index(cacm_copy))({"q": query}, Run({"q": reference[:30]}))["q"]
        assert status == 200
        assert [(r["id"], r["score"]) for r in reply["results"]] == [tuple(x) for x in full]
        # a filter on the rerank endpoint: the failing candidates are dropped, the rest reranked
        status, reply = call(port, "POST", "/api/rerank", {"query": query, "pipeline": "qld",
                                                           "candidates": [d for d, _ in reference[:30]],
                                                           "filter": "year >= 1975"})
        old = [(d, s) for d, s in full if (index.docstore.get(d).metadata or {}).get("year", 0) >= 1975]
        assert status == 200 and 0 < len(old) < len(full)
        assert [(r["id"], r["score"]) for r in reply["results"]] == [tuple(x) for x in old]
        status, reply = call(port, "POST", "/api/rerank", {"query": query, "candidates": ["CACM-0001"],
                                                           "filter": "year >"})
        assert status == 400 and "filter" in reply["error"]


def test_updates_over_http_equal_a_fresh_build(cacm_copy, cacm_docs, tmp_path):
    topics = dict(list(collections.load_topics("cacm").items())[:20])
    new = [{"id": f"N{i}", "title": "Sorting", "text": f"parallel sorting networks {i}"} for i in range(5)]
    with serving(cacm_copy) as port:
        assert call(port, "POST", "/api/documents", {"documents": new})[0] == 200
        status, reply = call(port, "POST", "/api/documents/delete", {"ids": ["CACM-0001", "N2"]})
        assert status == 200 and reply["documents"] == 3204 + 5 - 2
        _, reply = call(port, "POST", "/api/search", {"query": "parallel sorting networks", "k": 5})
        assert {r["id"] for r in reply["results"]} & {"N0", "N1", "N3", "N4"}
        assert "N2" not in {r["id"] for r in reply["results"]}
    docs = [d for d in cacm_docs if d.id != "CACM-0001"]
    docs += [Document(r["id"], r["title"], r["text"]) for r in new if r["id"] != "N2"]
    build_index(docs, tmp_path / "fresh", progress=False)
    for name in ("bm25", "qld"):
        ours = format_run(build(name, open_index(cacm_copy))(topics))
        assert ours == format_run(build(name, open_index(tmp_path / "fresh"))(topics)), name


@pytest.mark.parametrize("method, path, body", MALFORMED)
def test_bad_requests_get_a_4xx_with_one_line(cacm_copy, method, path, body):
    with serving(cacm_copy) as port:
        status, reply = call(port, method, path, body if method == "POST" else None)
    assert 400 <= status < 500
    assert isinstance(reply.get("error"), str) and "\n" not in reply["error"] and reply["error"]


def test_time_limit_and_body_limit(cacm_copy):
    with serving(cacm_copy, max_body=200) as port:
        status, reply = call(port, "POST", "/api/search", {"query": "x" * 300})
        assert status == 413 and "200 bytes" in reply["error"]
    with serving(cacm_copy, time_limit=1e-6) as port:
        status, reply = call(port, "POST", "/api/search", {"query": "parallel sorting"})
        assert status == 503 and "longer than" in reply["error"]
        doc = {"documents": [{"id": "TL1", "text": "zebra"}]}  # a write cannot be stopped half way:
        assert call(port, "POST", "/api/documents", doc)[0] == 200  # it answers what it did


def test_pipelines_kept_are_bounded_and_rm3_is_only_a_first_stage(cacm_copy):
    """Every k or parameter value builds a pipeline; the server keeps the last few, not all. RM3
    searches the whole index again, so after a first stage or in a rerank it would pass over the
    filters and the candidates: refused."""
    from retrieval.service.engine import MAX_PIPELINES

    engine = Engine(cacm_copy)
    for k in range(1, 3 * MAX_PIPELINES):
        engine.search("parallel sorting", "qld", k=k)
    assert len(engine.pipelines) == MAX_PIPELINES
    rm3 = {"model": "bm25", "rm3": True}
    assert engine.search("sorting", rm3, k=3, exclude=["CACM-1724"])["results"]  # first: fine
    with pytest.raises(InputError, match="rm3 searches the whole index again"):
        engine.search("sorting", ["bm25", rm3], k=3, exclude=["CACM-1724"])
    with pytest.raises(InputError, match="rm3 searches the whole index again"):
        engine.rerank("sorting", ["CACM-3075", "CACM-0001"], rm3)


def test_writes_need_the_token_when_one_is_set(cacm_copy):
    doc = {"documents": [{"id": "T1", "text": "token test"}]}
    with serving(cacm_copy, token="s3cret") as port:
        assert call(port, "POST", "/api/documents", doc)[0] == 401
        assert call(port, "POST", "/api/documents", doc, {"Authorization": "Bearer wrong"})[0] == 401
        assert call(port, "POST", "/api/documents", doc, {"Authorization": "Basic s3cret"})[0] == 401
        assert call(port, "POST", "/api/documents", doc, {"Authorization": "s3cret"})[0] == 401
        assert call(port, "POST", "/api/documents", doc, {"Authorization": "Bearer s3cret"})[0] == 200
        doc["documents"][0]["id"] = "T2"  # the scheme is case-insensitive (RFC 9110)
        assert call(port, "POST", "/api/documents", doc, {"Authorization": "bearer s3cret"})[0] == 200
        assert call(port, "POST", "/api/search", {"query": "token test"})[0] == 200  # reads are open
    assert loopback("127.0.0.1") and loopback("::1") and loopback("localhost")
    assert not loopback("0.0.0.0") and not loopback("192.168.1.5")
    assert write_token("127.0.0.1", None) is None or os.environ.get("RETRIEVAL_TOKEN")
    assert write_token("0.0.0.0", None)  # bound beyond loopback: a token is always required


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def test_search_page_in_headless_chromium(cacm_copy, tmp_path):
    """The page loads the index's pipelines, runs the query from its URL and shows ranked results
    with the query terms highlighted."""
    if _chromium() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is required in CI (apt-get install -y chromium)")
        pytest.skip("chromium not installed")
    import matplotlib.image

    with serving(cacm_copy) as port:
        url = f"http://127.0.0.1:{port}/?q=parallel+sorting+algorithms&p=0&mode=search&k=10"
        common = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  f"--user-data-dir={tmp_path / 'profile'}", "--hide-scrollbars",
                  "--virtual-time-budget=20000"]
        shot = tmp_path / "page.png"
        subprocess.run([*common, "--window-size=1100,1400", f"--screenshot={shot}", url],
                       capture_output=True, timeout=180, check=True)
        dom = subprocess.run([*common, "--dump-dom", url], capture_output=True, text=True, timeout=180,
                             check=True).stdout
    assert dom.count('class="hit"') == 10 and "CACM-3075" in dom and "<mark>" in dom
    assert '10 results in' in dom
    pixels = matplotlib.image.imread(shot)[..., :3]
    highlight = np.all(np.abs(pixels - np.array([0xFF, 0xD5, 0x4A]) / 255) < 0.03, axis=2)
    header = np.all(np.abs(pixels - np.array([0x1F, 0x3B, 0x63]) / 255) < 0.03, axis=2)
    assert highlight.sum() > 2000  # highlighted query terms on screen
    assert header[:60].mean() > 0.5  # the page's header bar rendered


ATTACK_PAGE = """<!doctype html>
<html><body>
<iframe name="sink" style="display:none"></iframe>
<form id="form" method="POST" action="TARGET/api/documents" enctype="text/plain" target="sink">
<input type="hidden" name='{"documents": [{"id": "evil", "text": "x' value='"}]}'>
</form>
<div id="out">started</div>
<script>
const out = document.getElementById("out");
fetch("TARGET/api/documents/delete", {method: "POST", mode: "no-cors",
      headers: {"Content-Type": "text/plain"}, body: '{"ids": ["CACM-0005"]}'})
  .then(() => { out.textContent = "fetch sent"; })
  .catch((e) => { out.textContent = "fetch failed: " + e; })
  .finally(() => { document.getElementById("form").submit(); out.textContent += ", form sent"; });
</script>
</body></html>
"""


def test_a_page_of_another_origin_cannot_write(cacm_copy, tmp_path):
    """Issue 49: a page served from another loopback origin (another port) tries the no-cors fetch
    and the text/plain form that once deleted and added documents; both reach the server and are
    refused (403: another origin), and the index is byte for byte as before."""
    import functools
    from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

    if _chromium() is None:
        if os.environ.get("CI") == "true":
            pytest.fail("chromium is required in CI (apt-get install -y chromium)")
        pytest.skip("chromium not installed")
    before = {p.relative_to(cacm_copy): p.read_bytes() for p in cacm_copy.rglob("*") if p.is_file()}
    seen: list = []
    site = tmp_path / "site"
    site.mkdir()
    with serving(cacm_copy, record=seen) as port:
        (site / "index.html").write_text(ATTACK_PAGE.replace("TARGET", f"http://127.0.0.1:{port}"))
        handler = functools.partial(SimpleHTTPRequestHandler, directory=str(site))
        handler.log_message = lambda *a: None
        attacker = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=attacker.serve_forever, daemon=True).start()
        try:
            url = f"http://127.0.0.1:{attacker.server_address[1]}/index.html"
            browser = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                       f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=15000", "--dump-dom"]
            dom = subprocess.run([*browser, url], capture_output=True, text=True, timeout=180,
                                 check=True).stdout
        finally:
            attacker.shutdown()
    assert "fetch sent, form sent" in dom  # the browser sent both
    assert ("POST", "/api/documents/delete", 403) in seen and ("POST", "/api/documents", 403) in seen
    assert not [s for s in seen if s[2] == 200]
    after = {p.relative_to(cacm_copy): p.read_bytes() for p in cacm_copy.rglob("*") if p.is_file()}
    assert after == before
    assert "CACM-0005" in open_index(cacm_copy).doc_id_list


def test_bounded_load_no_5xx_no_lost_documents(cacm_copy, cacm_docs):
    """8 clients, 800 mixed requests (15% malformed, 13% adds and deletes): no 5xx, no transport
    error, and the index holds exactly the documents the successful writes imply, each once.
    eval/bench_service.py runs 10,000 and reports latency percentiles."""
    with serving(cacm_copy) as port:
        outcome = run_load("127.0.0.1", port, [d.id for d in cacm_docs], requests=800, clients=8)
    assert not outcome.errors
    assert outcome.count(lambda s: s >= 500) == 0
    assert outcome.statuses["malformed"] and all(400 <= s < 500 for s in outcome.statuses["malformed"])
    assert outcome.added and outcome.deleted
    index = open_index(cacm_copy)
    expected = ({d.id for d in cacm_docs} | outcome.added) - outcome.deleted
    assert set(index.shard_of) == expected
    assert index.statistics["documents"] == len(expected)  # no document held twice


@pytest.mark.slow
def test_ask_over_http_and_on_the_page(tmp_path):
    """Questions on a small passage index: the answer with its evidence, in JSON and on the page."""
    from retrieval.cli import main

    corpus = tmp_path / "passages.jsonl"
    rows = [("p1", "Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
            ("p2", "Cats", "A cat is a small domesticated carnivorous mammal."),
            ("p3", "Paris", "Paris is the capital and largest city of France.")]
    corpus.write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in rows))
    index = tmp_path / "passages"
    assert main(["index", "--collection", str(corpus), "--index", str(index), "--dense"]) == 0
    with serving(index) as port:
        status, reply = call(port, "POST", "/api/ask", {"question": "Who wrote Hamlet?", "passages": 3})
        assert status == 200
        best = reply["answers"][0]
        assert "Shakespeare" in best["answer"] and best["evidence"][0]["passage_id"] == "p1"
        e = best["evidence"][0]
        assert e["passage"][e["start"]:e["end"]] == best["answer"]
        for pipeline in ("dense", "hybrid"):  # the neural first stages over HTTP too
            status, reply = call(port, "POST", "/api/search", {"query": "the capital of France",
                                                               "pipeline": pipeline, "k": 2})
            assert status == 200 and reply["results"][0]["id"] == "p3", pipeline
        _, info = call(port, "GET", "/api/info")
        offered = [p["pipeline"] for p in info["pipelines"]]
        assert "dense" in offered and "hybrid" in offered
        romeo = {"id": "p4", "title": "Romeo", "text": "Romeo and Juliet is a play by William Shakespeare."}
        assert call(port, "POST", "/api/documents", {"documents": [romeo]})[0] == 200  # now a live index
        status, reply = call(port, "POST", "/api/ask", {"question": "Who wrote Romeo and Juliet?"})
        assert status == 200 and "Shakespeare" in reply["answers"][0]["answer"]  # updates keep ask working
        evidence = {e["passage_id"]: e["passage"] for e in reply["answers"][0]["evidence"]}
        assert evidence.get("p4") == romeo["text"]
        if _chromium() is None:
            return
        url = f"http://127.0.0.1:{port}/?q=Who+wrote+Hamlet%3F&p=0&mode=ask"
        browser = [_chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                   f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=30000", "--dump-dom"]
        dom = subprocess.run([*browser, url], capture_output=True, text=True, timeout=180, check=True).stdout
    assert 'class="answer"' in dom and "Shakespeare</mark>" in dom


def test_cli_serve_starts_and_answers(cacm_copy, tmp_path, capsys):
    """`retrieval serve` as a user runs it: listens on loopback, answers, stops on SIGTERM;
    a bad port is a one-line error."""
    import socket
    import sys

    from retrieval.cli import main

    with pytest.raises(SystemExit) as bad_port:
        main(["serve", "--index", str(cacm_copy), "--port", "70000"])
    err = capsys.readouterr().err
    assert bad_port.value.code == 2 and err.count("\n") == 1
    assert "--port: must be in [1, 65535], got 70000" in err
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        s.listen()  # a port in use: refused before the server is announced
        assert main(["serve", "--index", str(cacm_copy), "--port", str(port)]) == 2
        err = capsys.readouterr().err
        assert err == f"retrieval: error: cannot listen on 127.0.0.1:{port} (Address already in use)\n"
    server = subprocess.Popen([sys.executable, "-m", "retrieval.cli", "serve", "--index", str(cacm_copy),
                               "--port", str(port)], stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while True:
            try:
                status, reply = call(port, "GET", "/api/info")
                break
            except OSError:
                assert time.time() < deadline and server.poll() is None, "retrieval serve did not start"
                time.sleep(0.2)
        assert status == 200 and reply["index"]["stats"]["documents"] == 3204
        status, reply = call(port, "GET", "/")
        assert status == 200 and "<title>retrieval: search</title>" in reply["html"]
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert f"on http://127.0.0.1:{port}/" in server.stderr.read()
