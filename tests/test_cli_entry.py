"""The `retrieval` entry point as the README describes it: --data-dir before or after the subcommand,
and `retrieval serve` ending in status 143 on SIGTERM (130 on Ctrl-C) like every other command."""

import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from retrieval import collections
from retrieval.cli import main, parser


@pytest.fixture
def restore_data_dir():
    yield
    collections.set_data_dir(None)


def test_data_dir_is_taken_before_or_after_the_subcommand():
    p = parser()
    for argv in (["--data-dir", "D", "search", "--index", "i", "--topics", "t"],
                 ["search", "--index", "i", "--topics", "t", "--data-dir", "D"],
                 ["train", "late", "--index", "i", "--output", "o", "--data-dir", "D"],
                 ["train", "--data-dir", "D", "late", "--index", "i", "--output", "o"]):
        assert str(p.parse_args(argv).data_dir) == "D", argv
    assert p.parse_args(["info", "--index", "i"]).data_dir is None
    # given on both sides, the one after the subcommand (the later one) wins
    assert str(p.parse_args(["--data-dir", "A", "info", "--index", "i", "--data-dir", "B"]).data_dir) == "B"


def test_data_dir_after_the_subcommand_finds_the_collections(tmp_path, capsys, restore_data_dir):
    """A wrong data directory given after the subcommand is the one used (and named in the error),
    so the flag is not silently ignored there."""
    empty = tmp_path / "nothing-here"
    empty.mkdir()
    index = tmp_path / "idx"
    assert main(["index", "--collection", "cacm", "--index", str(index), "--data-dir", str(empty)]) == 2
    assert f"{empty}/cacm: collection 'cacm' not found" in capsys.readouterr().err
    assert not index.exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sig, status, message", [(signal.SIGTERM, 143, "retrieval: terminated"),
                                                  (signal.SIGINT, 130, "retrieval: interrupted")])
def test_serve_exits_143_on_sigterm_and_130_on_ctrl_c(tiny_docs, tmp_path, sig, status, message):
    """uvicorn shuts down gracefully on the signal; the command then ends as any other command does
    when stopped (it used to exit 0, with nothing said)."""
    index = tmp_path / "idx"
    assert main(["index", "--collection", str(tiny_docs), "--index", str(index)]) == 0
    port = _free_port()
    server = subprocess.Popen([sys.executable, "-m", "retrieval.cli", "serve", "--index", str(index),
                               "--port", str(port)], stderr=subprocess.PIPE, text=True,
                              # a child started in the background would ignore SIGINT otherwise
                              preexec_fn=lambda: signal.signal(signal.SIGINT, signal.default_int_handler))
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/info", timeout=5) as reply:
                    assert reply.status == 200
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "serve did not start"
                time.sleep(0.2)
        server.send_signal(sig)
        err = server.communicate(timeout=60)[1]
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
    assert server.returncode == status and err.strip().endswith(message), (server.returncode, err)


def test_qa_eval_takes_a_named_qa_set(tmp_path, capsys):
    """`qa-eval --data xquad-en` (as the README writes it) reads the set from the data directory; a
    bare file name that is neither a file nor a set is one line naming it."""
    import json

    from retrieval.collections import load_examples

    unseen = load_examples("xquad-en:unseen")
    first = unseen[0]
    predictions = tmp_path / "preds.json"
    predictions.write_text(json.dumps({first.id: first.answers[0].text}))
    assert main(["qa-eval", "--data", "xquad-en:unseen", "--predictions", str(predictions),
                 "--allow-missing"]) == 0
    scores = json.loads(capsys.readouterr().out)
    assert scores["total"] == len(unseen) == 838
    assert scores["exact"] == 100 / 838
    assert main(["qa-eval", "--data", "xquad.en.json", "--predictions", str(predictions)]) == 2
    assert capsys.readouterr().err == "retrieval: error: xquad.en.json: file not found\n"
