"""`retrieval serve` against hostile pages and clients (issue 49, items 1-5): writes and API reads
only from its own origin and host, in JSON; no server path in a request; bounded work stopped at
its deadline; a JSON 503 while the index is away (eval/hostile_service.py)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from retrieval.errors import InputError
from retrieval.service.guard import allowed_hosts, host_name, refusal

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "eval"))
_spec = importlib.util.spec_from_file_location("hostile_service", ROOT / "eval" / "hostile_service.py")
hostile_service = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(hostile_service)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[tuple[str, str], str]:
    rows = hostile_service.run_cases(tmp_path_factory.mktemp("hostile-service"))
    return {(category, case): outcome for category, case, outcome in rows}


@pytest.mark.parametrize("category", sorted({c for c, *_ in hostile_service.CASES}))
def test_every_case_gets_what_it_expects(outcomes, category):
    expected = {n: e for c, n, _, e in hostile_service.CASES if c == category}
    got = {case: o for (c, case), o in outcomes.items() if c == category}
    assert len(got) >= 4
    assert {case: o for case, o in got.items() if o != expected[case]} == {}


def test_host_names_and_allow_lists():
    assert host_name("127.0.0.1:8000") == "127.0.0.1" and host_name("[::1]:80") == "::1"
    assert host_name("LocalHost") == "localhost" and host_name("a:b:c") is None and host_name("[::1") is None
    hosts, anywhere = allowed_hosts("127.0.0.1", ["search.example"])
    assert hosts == {"127.0.0.1", "localhost", "::1", "search.example"} and not anywhere
    hosts, anywhere = allowed_hosts("0.0.0.0")
    assert hosts == {"0.0.0.0", "localhost"} and anywhere
    assert refusal("GET", "/api/info", {"host": "192.168.1.5:8000"}, hosts, anywhere) is None
    assert refusal("GET", "/api/info", {"host": "rebound.example:8000"}, hosts, anywhere)[0] == 400
    ok = {"host": "localhost:8000", "content-type": "application/json", "origin": "http://localhost:8000"}
    assert refusal("POST", "/api/search", ok, hosts, anywhere) is None
    assert refusal("POST", "/api/search", ok | {"origin": "http://localhost:9000"}, hosts, anywhere)[0] == 403
    assert refusal("POST", "/api/search", ok | {"content-type": "text/plain"}, hosts, anywhere)[0] == 415


def test_engine_refuses_paths_and_over_limits_before_any_work(tmp_path):
    """The engine's own checks (the service's API is only one way in): the same error for a path
    that exists and one that does not, and limits on stages and depths."""
    from retrieval.service.engine import MAX_STAGES, Engine

    fx = hostile_service.Fixture(tmp_path / "fx")
    engine = Engine(fx.index)
    errors = set()
    for path in (fx.index / "manifest.json", tmp_path / "missing.safetensors"):
        with pytest.raises(InputError) as e:
            engine.search("cats", ["bm25", {"model": "late", "checkpoint": str(path)}])
        errors.add(str(e.value))
    assert len(errors) == 1 and "name a file of the server" in errors.pop()
    with pytest.raises(InputError, match=f"at most {MAX_STAGES} stages"):
        engine.search("cats", ["bm25"] + ["qld"] * MAX_STAGES)
    with pytest.raises(InputError, match="depth may be at most 200"):
        engine.rerank("cats", ["d0001"], {"model": "late", "depth": 201})
    at_the_limits = [{"model": "bm25", "cutoff": 1000}, {"model": "qld", "hits": 1000}]
    assert engine.search("cats", at_the_limits)["results"]
