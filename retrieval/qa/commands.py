"""What `retrieval ask`, `retrieval qa-eval` and `retrieval train reader` do (cli.py parses)."""

from __future__ import annotations

import json
import sys
from argparse import Namespace
from pathlib import Path

from retrieval.errors import InputError
from retrieval.storage import write_output


def read_predictions(path: str | Path) -> dict[str, str]:
    """A SQuAD predictions file: a JSON object {question id: answer text}."""
    from retrieval.qa.squad import _load_json

    preds = _load_json(Path(path))
    if not isinstance(preds, dict) or not all(isinstance(v, str) for v in preds.values()):
        raise InputError("expected a JSON object {question id: answer text}", path)
    return preds


def _pipeline(args: Namespace):
    from retrieval.index import open_index
    from retrieval.qa.pipeline import DEFAULT_DEPTH, RetrieveThenRead, check_settings, first_stage

    check_settings(args.k, args.temperature)
    index = open_index(args.index)
    stage = first_stage(index, bm25_weight=args.bm25_weight, query_model=args.query_model,
                        precision=args.precision, threads=args.threads, depth=max(args.k, DEFAULT_DEPTH))
    return RetrieveThenRead(stage, args.reader, index, passages=args.k, temperature=args.temperature,
                            answerable=not args.keep_null, threads=args.threads, precision=args.precision)


def cmd_ask(args: Namespace) -> None:
    """One question to stdout, or a SQuAD file of questions to a predictions file."""
    from retrieval.qa.pipeline import best_answers
    from retrieval.qa.squad import read_questions

    if bool(args.question) == bool(args.questions):
        raise InputError("give either a question or --questions FILE")
    if args.questions and not args.output:
        raise InputError("--questions needs --output predictions.json")
    if args.question is not None and not args.question.strip():
        raise InputError("empty question")
    queries = read_questions(args.questions) if args.questions else None
    qa = _pipeline(args)
    if queries is None:
        answers = qa.ask(args.question)[:args.top]
        if args.json:
            print(json.dumps([a.to_json() for a in answers], indent=2))
            return
        for a in answers:
            print(f"{a.prob:.4f}  {a.text}")
            for e in a.evidence:
                print(f"        {e.passage_id} [{e.start}:{e.end}]  p(z|x)={e.p_passage:.4f}"
                      f"  p(y|z,x)={e.p_answer_given_passage:.4f}")
        return
    answers = qa.ask_batch(queries)
    write_output(args.output, _json_bytes(best_answers(answers)))
    if args.details:
        write_output(args.details, _json_bytes({q: [a.to_json() for a in ranked[:args.top]]
                                                for q, ranked in answers.items()}))
    print(f"answered {len(answers)} questions -> {args.output}", file=sys.stderr)


def cmd_qa_eval(args: Namespace) -> None:
    """SQuAD's official EM/F1 of a predictions file, as JSON."""
    from retrieval.qa.metrics import evaluate
    from retrieval.qa.squad import gold_answers, read_squad

    gold = gold_answers(read_squad(args.data))
    preds = read_predictions(args.predictions)
    print(json.dumps(evaluate(gold, preds, require_all=not args.allow_missing)))


def cmd_train_reader(args: Namespace) -> None:
    """Fine-tune the span reader; the checkpoint goes to --output."""
    from retrieval import collections
    from retrieval.qa.train import train_reader

    root = collections.data_dir()
    data = args.data or root / "squad2-dev" / "dev-v2.0.json"
    exclude = args.exclude or root / "xquad-en" / "xquad.en.json"
    info = train_reader(data, args.output, exclude=exclude, base_model=args.base_model,
                        epochs=args.epochs, lr=args.lr, batch_size=args.batch_size,
                        threads=args.threads, seed=args.seed, impossible=args.impossible,
                        precision=args.precision, max_length=args.max_length, stride=args.stride,
                        log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(info, indent=2))


def cmd_train_realm(args: Namespace) -> None:
    """REALM marginal-likelihood training of the query encoder (document side fixed)."""
    from retrieval import collections
    from retrieval.dense.faiss_index import load_dense_part
    from retrieval.index import Index
    from retrieval.qa.reader import SpanReader
    from retrieval.qa.realm import train_query_side
    from retrieval.qa.squad import exclude_paragraphs, read_squad

    if args.index is None:
        raise InputError("train realm needs --index (a passage index with a dense part)")
    root = collections.data_dir()
    examples = read_squad(args.data or root / "squad2-dev" / "dev-v2.0.json")
    examples = [e for e in exclude_paragraphs(examples, read_squad(
        args.exclude or root / "xquad-en" / "xquad.en.json")) if e.answers]
    if args.realm_questions and args.realm_questions < len(examples):
        examples = examples[::len(examples) // args.realm_questions][:args.realm_questions]
    faiss_index, doc_ids, _ = load_dense_part(Path(args.index))
    texts = {d.id: d.text for d in Index.open(args.index).docstore}
    reader = SpanReader(args.reader, precision=args.precision, threads=args.threads)
    info = train_query_side(examples, faiss_index.reconstruct_n(0, faiss_index.ntotal),
                            [str(d) for d in doc_ids], texts, reader, args.output, k=args.realm_k,
                            epochs=args.epochs, lr=args.lr, batch_size=args.batch_size, seed=args.seed,
                            log=lambda m: print(m, file=sys.stderr, flush=True))
    print(json.dumps(info, indent=2))


def _json_bytes(obj: object) -> bytes:
    """JSON as the package writes it (sorted keys, indented)."""
    return (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode()
