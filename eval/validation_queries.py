"""Validation query sets for tuning search on the Wikipedia passages, sharing nothing with the benchmark's.

    python eval/validation_queries.py --wiki /work/data/wiki --squad ../shared/data/squad2-dev/dev-v2.0.json

../shared/tools/wiki_passages.py takes the first 2,000 of the shuffled SQuAD 2.0 dev questions and the
first 1,000 of the shuffled article titles as eval/bench_real.py's query sets. This script makes the
same two shuffled lists (same rules, same seeds) and writes the next 1,000 of each, the benchmark's
neighbours and of the same kind, none of them a benchmark query:
WIKI/queries-squad-validation.jsonl and WIKI/queries-titles-validation.jsonl. Settings of the search
kernels (eval/bench_real.py --queries validation times them) are chosen on these.
"""

from __future__ import annotations

import argparse
import json
import random
import re
from pathlib import Path

TAKEN = {"squad": 2000, "titles": 1000}  # what wiki_passages.py writes for the benchmark
SIZE = 1000


def squad_questions(path: Path) -> list[str]:
    """wiki_passages.py's shuffled list of distinct SQuAD questions."""
    squad = json.loads(path.read_text(encoding="utf-8"))
    questions, seen = [], set()
    for article in squad["data"]:
        for paragraph in article["paragraphs"]:
            for qa in paragraph["qas"]:
                text = " ".join(qa["question"].split())
                if text and text.lower() not in seen:
                    seen.add(text.lower())
                    questions.append(text)
    random.Random(0).shuffle(questions)
    return questions


def article_titles(corpus: Path) -> list[str]:
    """wiki_passages.py's shuffled list of distinct titles of 2 to 6 words (brackets dropped)."""
    titles: set[str] = set()
    with open(corpus, encoding="utf-8") as f:
        for line in f:
            passage = json.loads(line)
            if passage["_id"].endswith("_0"):
                title = re.sub(r"\s*\([^)]*\)", "", passage["title"]).strip()
                if 2 <= len(title.split()) <= 6:
                    titles.add(title)
    ordered = sorted(titles)
    random.Random(1).shuffle(ordered)
    return ordered


def write(path: Path, prefix: str, texts: list[str]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for i, text in enumerate(texts):
            f.write(json.dumps({"_id": f"{prefix}{i}", "text": text}, ensure_ascii=False) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wiki", type=Path, required=True, help="wiki_passages.py's output directory")
    parser.add_argument("--squad", type=Path, required=True, help="SQuAD 2.0 dev JSON")
    args = parser.parse_args()
    sets = {"squad": squad_questions(args.squad), "titles": article_titles(args.wiki / "corpus.jsonl")}
    for name, texts in sets.items():
        lines = (args.wiki / f"queries-{name}.jsonl").read_text(encoding="utf-8").splitlines()
        benchmark = [json.loads(line)["text"] for line in lines]
        if texts[:TAKEN[name]] != benchmark:
            raise SystemExit(f"{args.wiki}/queries-{name}.jsonl is not wiki_passages.py's selection")
        chosen = texts[TAKEN[name]:TAKEN[name] + SIZE]
        write(args.wiki / f"queries-{name}-validation.jsonl", f"v{name[0]}", chosen)
        print(f"{name}: {len(chosen)} validation queries")


if __name__ == "__main__":
    main()
