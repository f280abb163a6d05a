"""The package stands alone: its models ship inside it (checked by SHA-256 at load), our model loads
leave the process's Hugging Face settings alone, and a built wheel or sdist installed in a fresh
virtual environment, with no checkout beside it, indexes, searches, evaluates, reranks and answers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from fnmatch import fnmatch
from pathlib import Path

import pytest

from retrieval.errors import InputError
from retrieval.runtime import local_models
from retrieval.runtime.local_models import PACKAGED, recorded_checksums, verify_packaged
from retrieval.storage import sha256_file

ROOT = Path(__file__).resolve().parents[1]


def test_the_recorded_checksums_are_those_of_the_shipped_files():
    recorded = recorded_checksums()
    assert {"late/late.safetensors", "reader/model.safetensors", "reader/tokenizer.json"} <= set(recorded)
    for name, digest in recorded.items():
        assert sha256_file(PACKAGED / name) == digest, f"retrieval/models/{name}: update SHA256SUMS"


def test_package_data_ships_every_checked_model_file():
    from setuptools.config.pyprojecttoml import read_configuration

    data = read_configuration(ROOT / "pyproject.toml")["tool"]["setuptools"]["package-data"]
    patterns = data["retrieval"]
    for name in [*recorded_checksums(), "SHA256SUMS", "README.md"]:
        assert any(fnmatch(f"models/{name}", p) for p in patterns), f"models/{name} is not package data"


@pytest.fixture()
def copied_models(tmp_path, monkeypatch) -> Path:
    """The shipped late checkpoint and its checksums, copied where a test may damage them."""
    models = tmp_path / "models"
    (models / "late").mkdir(parents=True)
    shutil.copy(PACKAGED / "late" / "late.safetensors", models / "late")
    late = recorded_checksums()["late/late.safetensors"]
    (models / "SHA256SUMS").write_text(f"{late}  late/late.safetensors\n")
    monkeypatch.setattr(local_models, "PACKAGED", models)
    return models


def test_an_altered_shipped_model_is_refused_in_one_line(copied_models):
    path = copied_models / "late" / "late.safetensors"
    assert verify_packaged(path) == path  # intact: accepted
    data = bytearray(path.read_bytes())
    data[-1] ^= 1
    path.write_bytes(bytes(data))
    with pytest.raises(InputError) as e:
        verify_packaged(path)
    assert "does not match the SHA-256 recorded" in str(e.value) and "reinstall" in str(e.value)
    assert "\n" not in str(e.value) and str(path) in str(e.value)
    path.unlink()
    with pytest.raises(InputError, match="missing; reinstall"):
        verify_packaged(copied_models / "late")


def test_paths_outside_the_package_are_not_checked(tmp_path):
    own = tmp_path / "mine.safetensors"
    assert verify_packaged(own) == own


LOADS = """
import json, os, socket, sys
connections = []
def refuse(self, address):
    connections.append(str(address))
    raise OSError("network refused by the test")
socket.socket.connect = refuse
before = dict(os.environ)
from retrieval.late.model import LateModel
from retrieval.qa.reader import load_reader_model
from retrieval.dense.encoder import Encoder
LateModel()
load_reader_model()
Encoder().encode(["a query"])
import huggingface_hub.constants as hub
changed = sorted(k for k in set(before) | set(os.environ) if before.get(k) != os.environ.get(k)
                 and not k.startswith("TORCHINDUCTOR_"))  # torch's own cache setting, whoever loads it
print(json.dumps({"changed": changed, "connections": connections, "hub_offline": hub.HF_HUB_OFFLINE}))
"""


def test_our_model_loads_leave_the_environment_and_the_network_alone():
    """No HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE set for the whole process (another library's hub loads
    in the same process work as without us), and no connection attempted: `local_files_only=True`."""
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run([sys.executable, "-c", LOADS], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {"changed": [], "connections": [], "hub_offline": False}


# ---------------------------------------------------------------- the wheel and the sdist, alone

DOCS = [
    ("eiffel", "Eiffel Tower", "The Eiffel Tower is a wrought-iron tower in Paris, completed in 1889."),
    ("liberty", "Statue of Liberty", "The Statue of Liberty stands on Liberty Island in New York Harbor."),
    ("colosseum", "Colosseum", "The Colosseum is an ancient amphitheatre in the centre of Rome."),
    ("everest", "Mount Everest", "Mount Everest is the highest mountain above sea level, in the Himalayas."),
    ("nile", "Nile", "The Nile is a major river flowing north through Egypt into the Mediterranean Sea."),
    ("amazon", "Amazon", "The Amazon rainforest covers much of the Amazon basin of South America."),
]
TOPICS = {"1": "tower in Paris", "2": "highest mountain", "3": "river through Egypt"}
QRELS = {"1": "eiffel", "2": "everest", "3": "nile"}


def _write_inputs(work: Path) -> None:
    work.mkdir()
    (work / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "title": t, "text": x}) + "\n"
                                               for d, t, x in DOCS))
    (work / "topics.tsv").write_text("".join(f"{q}\t{t}\n" for q, t in TOPICS.items()))
    (work / "qrels.txt").write_text("".join(f"{q} 0 {d} 1\n" for q, d in QRELS.items()))


def _venv(path: Path) -> tuple[Path, dict[str, str]]:
    """A fresh virtual environment seeing the system's packages (torch and the rest: not reinstalled;
    pip and setuptools too, not the older ones a venv would bundle), and the environment to run in it:
    no PYTHONPATH, its bin first on PATH."""
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(path)],
                   check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env |= {"PATH": f"{path / 'bin'}{os.pathsep}{env.get('PATH', '')}", "VIRTUAL_ENV": str(path)}
    return path / "bin" / "python", env


def _install(python: Path, env: dict[str, str], package: Path) -> None:
    subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--no-deps", "--no-index",
                    "--no-build-isolation", "--force-reinstall", str(package)], env=env, check=True,
                   timeout=900)


def _run(args: list[str], env: dict[str, str], cwd: Path) -> str:
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(args)} failed:\n{done.stderr[-3000:]}"
    return done.stdout


def _imported_from(python: Path, env: dict[str, str], cwd: Path) -> Path:
    out = _run([str(python), "-c", "import retrieval; print(retrieval.__file__)"], env, cwd)
    return Path(out.strip()).resolve()


@pytest.mark.slow
def test_the_wheel_and_the_sdist_work_alone_in_a_fresh_venv(tmp_path):
    source = tmp_path / "source"  # a copy of what a build reads, so building leaves the checkout alone
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source)
    shutil.copytree(ROOT / "retrieval", source / "retrieval",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    dist = tmp_path / "dist"
    # the sdist, then the wheel built from the unpacked sdist: the wheel's models came through the sdist
    subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir", str(dist), str(source)],
                   check=True, capture_output=True, timeout=900)
    wheel, = dist.glob("retrieval-*.whl")
    sdist, = dist.glob("retrieval-*.tar.gz")

    python, env = _venv(tmp_path / "venv")
    _install(python, env, wheel)
    work = tmp_path / "work"
    _write_inputs(work)
    assert _imported_from(python, env, work).is_relative_to((tmp_path / "venv").resolve())
    cli = str(tmp_path / "venv" / "bin" / "retrieval")
    _run([cli, "index", "--collection", "corpus.jsonl", "--index", "idx", "--dense"], env, work)
    _run([cli, "search", "--index", "idx", "--topics", "topics.tsv", "--output", "bm25.run"], env, work)
    figures = json.loads(_run([cli, "eval", "--qrels", "qrels.txt", "bm25.run", "--measures", "MAP nDCG@10",
                               "--json"], env, work))
    assert figures["MAP"] == 1.0  # each topic's one relevant document ranked first
    _run([cli, "rerank", "--index", "idx", "--topics", "topics.tsv", "--run", "bm25.run",
          "--output", "late.run"], env, work)  # the default late checkpoint, shipped in the wheel
    reranked = json.loads(_run([cli, "eval", "--qrels", "qrels.txt", "late.run", "--measures", "MRR",
                                "--json"], env, work))
    assert reranked["MRR"] == 1.0
    answer = json.loads(_run([cli, "ask", "--index", "idx", "--json", "--passages", "2",
                              "When was the Eiffel Tower completed?"], env, work))
    assert "1889" in json.dumps(answer)  # the shipped reader read the dense part's passages
    api = _run([str(python), "-c", "from retrieval import rerank; print(rerank('highest mountain',"
                " ['a river in Egypt', 'Mount Everest is the highest mountain'])[0].id)"], env, work)
    assert api.strip() == "1"

    python, env = _venv(tmp_path / "venv-sdist")
    _install(python, env, sdist)
    assert _imported_from(python, env, work).is_relative_to((tmp_path / "venv-sdist").resolve())
    _run([str(python), "-c", "from retrieval.runtime.local_models import packaged_model as p; "
          "p('reader'); p('late/late.safetensors')"], env, work)
