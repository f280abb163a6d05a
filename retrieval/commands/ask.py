"""`retrieval ask` (retrieve, then read) and `retrieval qa-eval` (SQuAD EM/F1 of predictions)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from retrieval.commands.common import precision_flag, threads_flag
from retrieval.errors import InputError
from retrieval.pipeline.params import PARAMS
from retrieval.storage import json_bytes, write_output


def add(sub: argparse._SubParsersAction) -> None:
    _add_ask(sub)
    _add_qa_eval(sub)


def _flag(p: argparse.ArgumentParser, name: str, help: str = "") -> None:
    """A flag declared in params.PARAMS, with its type, default and help."""
    param = PARAMS[name]
    p.add_argument(param.flag, type=param.type, default=param.default,
                   help=f"{help or param.help} (default {param.default})")


def _add_ask(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("ask", help="answer a question from an index's passages (retrieve, read)",
                       description="REALM-style retrieve-then-read: p(y|x) = sum over the top "
                       "passages z of p(y|z,x) p(z|x), p(z|x) = softmax(score / temperature) over the "
                       "first stage's scores (dense, or cos + W * BM25 with --bm25-weight). Prints "
                       "answers with their probability and evidence (passage id, character span, "
                       "p(z|x), p(y|z,x)); with --questions, answers a SQuAD file and writes a "
                       "predictions file {question id: answer}.")
    p.add_argument("question", nargs="?", help="the question (or use --questions)")
    p.add_argument("--index", required=True, type=Path, help="passage index with a dense part")
    p.add_argument("--questions", type=Path, help="questions to answer (batch mode): a SQuAD-format file "
                   "or a named QA set (xquad-en, xquad-en:unseen, squad2-dev[:train|:validation])")
    p.add_argument("--output", type=Path, help="predictions JSON to write (batch mode)")
    p.add_argument("--details", type=Path, help="also write answers with evidence (batch mode)")
    p.add_argument("--reader", type=Path, default=None,
                   help="reader checkpoint directory (default: the "
                   "committed one, retrieval/models/reader, shipped in the package)")
    _flag(p, "passages")
    _flag(p, "temperature")
    p.add_argument("--keep-null", action="store_true", help="do not condition each passage's "
                   "span distribution on it holding an answer")
    _flag(p, "top")
    p.add_argument("--json", action="store_true", help="print answers as JSON")
    precision_flag(p, "how questions are encoded and passages read")
    _flag(p, "bm25_weight", "score passages by cos + W * BM25 before p(z|x) (0: dense only; 0.05 was "
          "best on squad2-dev training questions)")
    p.add_argument("--query-model", type=Path, default=None,
                   help="question encoder from `train realm` (default: the index's model)")
    threads_flag(p, "torch threads")
    p.set_defaults(handler=ask)


def ask(args: argparse.Namespace) -> None:
    """One question to stdout, or a SQuAD file of questions to a predictions file."""
    from retrieval.qa.pipeline import RetrieveThenRead, best_answers, first_stage

    if bool(args.question) == bool(args.questions):
        raise InputError("give either a question or --questions FILE")
    if args.questions and not args.output:
        raise InputError("--questions needs --output predictions.json")
    if args.question and (args.output or args.details):
        raise InputError("--output and --details are for --questions FILE; one question's answers are "
                         "printed (--json for JSON)")
    if args.question is not None and not args.question.strip():
        raise InputError("empty question")
    PARAMS["top"].check(args.top)
    queries = _questions(args.questions) if args.questions else None
    stage = first_stage(args.index, bm25_weight=args.bm25_weight, query_model=args.query_model,
                        precision=args.precision, threads=args.threads)
    qa = RetrieveThenRead(stage, args.reader, args.index, passages=args.passages,
                          temperature=args.temperature, answerable=not args.keep_null,
                          precision=args.precision, threads=args.threads)
    if queries is None:
        _print_answers(qa.ask(args.question)[:args.top], args.json)
        return
    answers = qa.ask_batch(queries)
    write_output(args.output, json_bytes(best_answers(answers)))
    if args.details:
        write_output(args.details, json_bytes({q: [a.to_json() for a in ranked[:args.top]]
                                                for q, ranked in answers.items()}))
    print(f"answered {len(answers)} questions -> {args.output}", file=sys.stderr)


def _questions(spec: Path) -> dict[str, str]:
    """Question id -> question text of a SQuAD file or a named QA set (batch `ask`)."""
    from retrieval.collections import load_examples

    questions = {ex.id: ex.question for ex in load_examples(spec)}
    empty = next((qid for qid, text in questions.items() if not text.strip()), None)
    if empty is not None:
        raise InputError(f"empty question {empty!r}", spec)
    return questions


def _print_answers(answers: list, as_json: bool) -> None:
    if as_json:
        print(json.dumps([a.to_json() for a in answers], indent=2))
        return
    for a in answers:
        print(f"{a.prob:.4f}  {a.text}")
        for e in a.evidence:
            print(f"        {e.passage_id} [{e.start}:{e.end}]  p(z|x)={e.p_passage:.4f}"
                  f"  p(y|z,x)={e.p_answer_given_passage:.4f}")


def _add_qa_eval(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("qa-eval", help="SQuAD EM/F1 of a predictions file",
                       description="Exact match and F1 exactly as SQuAD's official evaluation "
                       "script computes them (answer normalisation, max over gold answers).")
    p.add_argument("--data", required=True, type=Path, help="gold answers: a SQuAD-format file or a named "
                   "QA set (xquad-en, xquad-en:unseen, squad2-dev[:train|:validation])")
    p.add_argument("--predictions", required=True, type=Path,
                   help="JSON {question id: answer text}")
    p.add_argument("--allow-missing", action="store_true",
                   help="score missing predictions 0 instead of failing")
    p.set_defaults(handler=qa_eval)


def qa_eval(args: argparse.Namespace) -> None:
    """SQuAD's official EM/F1 of a predictions file, as JSON."""
    from retrieval.collections import load_examples
    from retrieval.formats.squad import gold_answers, read_predictions
    from retrieval.qa.metrics import evaluate

    gold = gold_answers(load_examples(args.data))
    preds = read_predictions(args.predictions)
    print(json.dumps(evaluate(gold, preds, require_all=not args.allow_missing)))
