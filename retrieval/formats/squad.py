"""SQuAD-format JSON (v1.1 and v2.0): questions, paragraphs and gold answers.

Errors in the file are one-line `InputError`s naming the file and, for JSON
syntax errors, the line.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from retrieval.errors import InputError
from retrieval.formats.textfile import check_utf8
from retrieval.types import Document


@dataclass(frozen=True)
class Answer:
    """A gold answer: its text and character offset in the paragraph."""

    text: str
    start: int


@dataclass(frozen=True)
class Example:
    """One question about one paragraph; `answers` is empty when unanswerable."""

    id: str
    question: str
    context: str
    title: str = ""
    answers: tuple[Answer, ...] = field(default=())

    @property
    def impossible(self) -> bool:
        """SQuAD 2.0's unanswerable questions have no gold answer."""
        return not self.answers


def passage_id(text: str) -> str:
    """A stable passage id from the paragraph text (deduplicates equal paragraphs)."""
    return "p" + hashlib.sha1(text.encode("utf-8")).hexdigest()[:12]


def _load_json(path: Path) -> Any:
    try:
        with open(path, encoding="utf-8") as f:
            return json.load(f)
    except FileNotFoundError:
        raise InputError("file not found", path) from None
    except json.JSONDecodeError as e:
        raise InputError(f"invalid JSON: {e.msg}", path, e.lineno) from None
    except RecursionError:
        raise InputError("JSON nested too deeply", path) from None
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read: {e}", path) from None


def _expect(cond: bool, what: str, path: Path) -> None:
    if not cond:
        raise InputError(f"not SQuAD JSON: expected {what}", path)


def _answers(qa: dict[str, Any], context: str, path: Path) -> tuple[Answer, ...]:
    out = []
    raw = qa.get("answers", [])
    _expect(isinstance(raw, list), f"a list of answers in question {qa.get('id')!r}", path)
    for a in raw:
        _expect(isinstance(a, dict) and isinstance(a.get("text"), str),
                f"answers with a 'text' string in question {qa.get('id')!r}", path)
        start = a.get("answer_start", -1)
        _expect(isinstance(start, int), f"an integer answer_start in question {qa.get('id')!r}",
                path)
        if context[start:start + len(a["text"])] != a["text"] or start < 0:
            found = context.find(a["text"])
            start = found if found >= 0 else -1
        out.append(Answer(a["text"], start))
    return tuple(out)


def read_squad(path: str | Path) -> list[Example]:
    """All questions of a SQuAD v1.1/v2.0 JSON file, in file order."""
    path = Path(path)
    doc = _load_json(path)
    _expect(isinstance(doc, dict) and isinstance(doc.get("data"), list),
            "an object with a 'data' list", path)
    out: list[Example] = []
    seen: set[str] = set()
    for article in doc["data"]:
        _expect(isinstance(article, dict) and isinstance(article.get("paragraphs"), list),
                "articles with a 'paragraphs' list", path)
        title = str(article.get("title", ""))
        for para in article["paragraphs"]:
            _expect(isinstance(para, dict) and isinstance(para.get("context"), str)
                    and isinstance(para.get("qas"), list),
                    "paragraphs with a 'context' string and a 'qas' list", path)
            for qa in para["qas"]:
                _expect(isinstance(qa, dict) and isinstance(qa.get("question"), str)
                        and "id" in qa, "questions with 'id' and 'question'", path)
                qid = str(qa["id"])
                _expect(qid not in seen, f"unique question ids ({qid!r} appears twice)", path)
                seen.add(qid)
                for text, what in ((qid, "question id"), (qa["question"], f"question {qid!r}"),
                                   (para["context"], f"the context of question {qid!r}")):
                    check_utf8(text, what, path)
                answers = () if qa.get("is_impossible") else _answers(qa, para["context"], path)
                out.append(Example(qid, qa["question"], para["context"], title, answers))
    _expect(bool(out), "at least one question", path)
    return out


def read_questions(path: str | Path) -> dict[str, str]:
    """Question id -> question text from a SQuAD file (batch `ask`)."""
    out: dict[str, str] = {}
    for ex in read_squad(path):
        if not ex.question.strip():
            raise InputError(f"empty question {ex.id!r}", path)
        out[ex.id] = ex.question
    return out


def paragraphs(examples: Iterable[Example]) -> dict[str, tuple[str, str]]:
    """Passage id -> (title, text), deduplicated by text, in first-seen order."""
    out: dict[str, tuple[str, str]] = {}
    for ex in examples:
        out.setdefault(passage_id(ex.context), (ex.title, ex.context))
    return out


def exclude_paragraphs(examples: Iterable[Example], held_out: Iterable[Example]) -> list[Example]:
    """Examples whose paragraph text does not occur among `held_out`'s paragraphs."""
    banned = {ex.context for ex in held_out}
    return [ex for ex in examples if ex.context not in banned]


def gold_answers(examples: Iterable[Example]) -> dict[str, list[str]]:
    """Question id -> gold answer texts (the official script's ground truths)."""
    return {ex.id: [a.text for a in ex.answers] for ex in examples}


def read_predictions(path: str | Path) -> dict[str, str]:
    """A SQuAD predictions file: a JSON object {question id: answer text}."""
    preds = _load_json(Path(path))
    if not isinstance(preds, dict) or not all(isinstance(v, str) for v in preds.values()):
        raise InputError("expected a JSON object {question id: answer text}", path)
    return preds


def passage_documents(files: Iterable[str | Path]) -> Iterator[Document]:
    """Documents for every distinct paragraph of the SQuAD files (title: article, spaced)."""
    seen: set[str] = set()
    for path in files:
        for pid, (title, text) in paragraphs(read_squad(path)).items():
            if pid not in seen:
                seen.add(pid)
                yield Document(pid, title.replace("_", " "), text)
