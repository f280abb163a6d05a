"""The Unicode tokenizer (issue 54) against Lucene's own analysis, and against the regex it replaced.

    python eval/bench_tokenizer.py [--repeats 5] [--all-code-points] [--record tests/lucene_analysis.json]

Through the Lucene backend's JVM (pyserini's Anserini jar, Lucene 9.9), for CACM, SciFact,
Vaswani and Cranfield (every document and every query text):

- how many texts' StandardTokenizer tokens and Anserini English-analyzer terms differ from
  `retrieval.analysis` (`tokenize`, `Analyzer`), and how many differed with the tokenizer before
  issue 54 (one regex for Latin text), with what the old one got wrong;
- the multilingual sample (MULTILINGUAL below, one case per script or feature) token for token;
- random strings over characters of every word-break class (fixed seed), short and longer than
  the 255-unit buffer;
- with --all-code-points, every code point in 19 contexts (some minutes), counted by kind.

Then the speed of analysis (what indexing spends on text) before and after, round robin.
--record writes the multilingual sample with Lucene's tokens, types and terms to the given JSON
file, which tests/test_analysis_unicode.py checks `retrieval.analysis` against without a JVM.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import statistics
import sys
import unicodedata
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from benchlib import machine_line, publish, round_robin

from retrieval.analysis import Analyzer, tokenize
from retrieval.collections import load_documents, load_topics
from retrieval.lucene.analysis import default_english_analyzer, english_terms, standard_tokens_typed

RESULTS = Path(__file__).parent / "results" / "tokenizer.md"
COLLECTIONS = ("cacm", "scifact", "vaswani", "cranfield")

MULTILINGUAL = {
    "latin-accents": "Café naïve résumé Ångström Zürich façade coöperate Æsir œuvre Straße STRASSE",
    "latin-decomposed": "Cafe\u0301 nai\u0308ve re\u0301sume\u0301 n\u0303",
    "cyrillic": "Привет, мир! Съешь же ещё этих мягких французских булок. Москва-река",
    "greek": "Ελληνικά: ΟΔΟΣ Οδός σοφία, Ἀθῆναι ΑΣ",
    "turkish": "İstanbul İSTANBUL ılık IŞIK",
    "arabic": "العربية: اللغة العربية جميلة ١٢٣ ٤٥٦ وَٱلْكِتَابُ",
    "hebrew": "שָׁלוֹם עוֹלָם צה\"ל ג'ירפה ה' אב\"ג'ד",
    "devanagari": "हिन्दी भाषा में खोज क्षत्रिय ज़िन्दगी हाथ नदी",
    "bengali-tamil": "বাংলা ভাষা தமிழ் மொழி",
    "han": "中文信息检索 漢字 𠀀𠀁",
    "japanese": "日本語のテキスト検索 ひらがな カタカナ・テスト ｶﾀｶﾅ ラーメン 々〆 ヴァ",
    "hangul": "한국어 텍스트 검색 한글 ᄀᄁ",
    "thai": "ภาษาไทยง่ายนิดเดียว การค้นหา ๑๒๓",
    "lao-khmer-myanmar": "ພາສາລາວ ភាសាខ្មែរ မြန်မာဘာသာ",
    "emoji": "😀 👍🏽 👩‍❤️‍💋‍👨 👨‍👩‍👧‍👦 🏳️‍🌈 🇺🇸🇯🇵 🇺 1️⃣ #⃣ ©️ © ™ ★ ❤️ ☺︎ 🏴󠁧󠁢󠁳󠁣󠁴󠁿 a😀b",
    "numbers": "1,000.50 3.14 1.2.3 10,5 ٣٫١٤ 12:30 1'000 ½ x² H₂O ５０ 2024-01-31",
    "apostrophes": "don't O’Neil rock'n'roll John's books’ 'quoted' l'homme ＪＯＨＮ＇Ｓ",
    "email-url": "mail john.doe@example.com or visit https://www.example.org/path/to_page?id=42&x=y",
    "underscores": "snake_case __init__ _private trailing_ ___ a_1 1_a ‿tie‿",
    "mixed-scripts": "Python3とJava8 abc日本def Москва2024 iPhone14Pro αβγ-δ ＡＢＣ１２３ Ⓜ️ⓜ",
    "punctuation": "x-ray e.g. U.S.A. state-of-the-art (a) [b] {c} ¿qué? ¡sí! a/b a\\b a|b a&b",
    "invisible": "zero\u200bwidth soft\u00adhyphen join\u200dme non\u200cjoin nbsp\u00a0x thin\u202fspace",
    "long-tokens": "a" * 300 + " " + "b" * 254 + ".c " + "1" * 254 + ",2 " + "\U0001D400" * 140,
}

_LETTER = r"[^\W\d_]"
_OLD_TOKEN = re.compile(  # the tokenizer before issue 54
    rf"\w+(?:(?:(?<={_LETTER})[.'\u2019:\u00b7](?={_LETTER})|(?<=\d)[.,;'\u2019](?=\d))\w+)*")
_OLD_ALNUM = re.compile(r"[^\W_]")


def old_tokenize(text: str) -> list[str]:
    """`retrieval.analysis.tokenize` before issue 54."""
    return _OLD_TOKEN.findall(text)


def old_indexed_tokens(text: str) -> list[str]:
    """The tokens the analyzer before issue 54 analysed: none of underscores alone, 255-character pieces."""
    return [token[i:i + 255] for token in old_tokenize(text) if _OLD_ALNUM.search(token)
            for i in range(0, len(token), 255)]


class OldAnalyzer(Analyzer):
    """`retrieval.analysis.Analyzer` before issue 54, its two methods verbatim but for the names."""

    def _analyze_token(self, token: str) -> list[str]:
        if not _OLD_ALNUM.search(token):
            return []
        pieces = [token[i:i + 255] for i in range(0, len(token), 255)]
        terms = []
        for piece in pieces:
            if len(piece) >= 2 and piece[-1] in "sS" and piece[-2] in "'\u2019\uff07":
                piece = piece[:-2]  # EnglishPossessiveFilter
            piece = piece.lower()
            if not piece or piece in self.stopwords:
                continue
            if self.stemmer == "porter":
                piece = self._porter.stem(piece, to_lowercase=False)
            terms.append(piece)
        return terms

    def __call__(self, text: str) -> list[str]:
        cache = self._cache
        out: list[str] = []
        for token in _OLD_TOKEN.findall(text):
            terms = cache.get(token)
            if terms is None:
                terms = self._analyze_token(token)
                with self._lock:
                    cache[token] = terms
            out.extend(terms)
        return out


def texts_of(collection: str) -> tuple[list[str], list[str]]:
    """(document texts as indexed, query texts) of a bundled collection."""
    return ([d.contents for d in load_documents(collection)],
            list(load_topics(collection).values()))


def check_texts(texts: list[str], lucene_analyzer: object) -> dict[str, object]:
    """How many texts our and the old tokens/terms differ from Lucene's on, with what the old got wrong."""
    ours, old = Analyzer(), OldAnalyzer()
    counts = Counter()
    wrong = Counter()
    for text in texts:
        lucene_tokens = [token for token, _ in standard_tokens_typed(text)]
        lucene_terms = english_terms(text, lucene_analyzer)
        counts["tokens"] += len(lucene_tokens)
        counts["ours tokens"] += tokenize(text) != lucene_tokens
        counts["ours terms"] += ours(text) != lucene_terms
        old_tokens = old_indexed_tokens(text)
        counts["old tokens"] += old_tokens != lucene_tokens
        counts["old terms"] += old(text) != lucene_terms
        for token in set(old_tokens) ^ set(lucene_tokens):
            wrong[("old only" if token in old_tokens else "Lucene only", token)] += 1
    return {"counts": counts, "wrong": wrong}


def random_strings(rng: random.Random, count: int, longest: int) -> list[str]:
    """Strings over characters of every word-break class, each from a few of them."""
    alphabet = list(MULTILINGUAL["mixed-scripts"] + MULTILINGUAL["hebrew"] + MULTILINGUAL["emoji"]
                    + MULTILINGUAL["invisible"] + MULTILINGUAL["thai"] + MULTILINGUAL["numbers"]
                    + "_.,;:'\u2019\u00b7\u0301\u093f\u200d\u00ad\ufe0f\ufe0e\u20e3\u3005\u3099"
                    "\U0001F3FD\U000E0067\U000E007F\U0001D400\n")
    alphabet = sorted(set(alphabet))
    out = []
    for _ in range(count):
        chars = rng.sample(alphabet, rng.randint(2, 8))
        out.append("".join(rng.choice(chars) for _ in range(rng.randint(1, longest))))
    return out


def mismatches(texts: list[str]) -> list[str]:
    """The texts whose tokens differ from Lucene's StandardTokenizer's."""
    return [t for t in texts if tokenize(t) != [token for token, _ in standard_tokens_typed(t)]]


CONTEXTS = ("{c}", "{c}{c}", "a{c}", "{c}a", "a{c}a", "1{c}1", "1{c}", "{c}1", "ア{c}ア", "ก{c}ก",
            "_{c}_", "{c}\u0301a", "😀{c}😀", "\u05d0{c}\u05d0", "{c}\u200d😀", "日{c}",
            "\U0001F1FA{c}", "👍{c}", "#{c}")


def code_point_differences() -> dict[str, int]:
    """Code points in some context of which our tokens differ from Lucene's, counted by whether
    Python's Unicode database (the interpreter's version) has them assigned."""
    found: Counter = Counter()
    points = [c for c in range(0x110000) if not 0xD800 <= c <= 0xDFFF]
    for i in range(0, len(points), 1500):
        chunk = points[i:i + 1500]
        text = " ".join(x.format(c=chr(c)) for c in chunk for x in CONTEXTS)
        if not mismatches([text]):
            continue
        for c in chunk:
            if mismatches([x.format(c=chr(c)) for x in CONTEXTS]):
                assigned = unicodedata.category(chr(c)) != "Cn"
                found[f"assigned in Unicode {unicodedata.unidata_version}" if assigned
                      else f"unassigned in Unicode {unicodedata.unidata_version}"] += 1
    return dict(found)


def record(path: Path) -> None:
    """Write the multilingual sample with Lucene's tokens, token types and English terms."""
    analyzer = default_english_analyzer()
    cases = {}
    for name, text in MULTILINGUAL.items():
        typed = standard_tokens_typed(text)
        cases[name] = {"text": text, "tokens": [t for t, _ in typed], "types": [k for _, k in typed],
                       "terms": english_terms(text, analyzer)}
    path.write_text(json.dumps({"lucene": "9.9.1 (pyserini 1.6.0's Anserini jar)",
                                "written_by": "python eval/bench_tokenizer.py --record " + str(path),
                                "cases": cases}, ensure_ascii=False, indent=1) + "\n")
    print(f"wrote {len(cases)} cases to {path}")


def speed(texts: list[str], repeats: int) -> dict[str, list[float]]:
    """Seconds to tokenize, and to analyse with a warm cache (as indexing does), all texts."""
    ours, old = Analyzer(), OldAnalyzer()
    fns: dict[str, Callable[[], object]] = {
        "tokenize before": lambda: [old_tokenize(t) for t in texts],
        "tokenize after": lambda: [tokenize(t) for t in texts],
        "analyse before": lambda: [old(t) for t in texts],
        "analyse after": lambda: [ours(t) for t in texts],
    }
    return round_robin(fns, repeats)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--all-code-points", action="store_true")
    parser.add_argument("--record", type=Path)
    args = parser.parse_args()
    if args.record:
        record(args.record)
        return
    lucene_analyzer = default_english_analyzer()
    lines = ["# Unicode word segmentation against Lucene's StandardTokenizer (issue 54)", "",
             f"Machine: {machine_line('regex', 'nltk', 'pyserini')}. Lucene 9.9.1 through the JVM.", "",
             "## Bundled collections: texts whose tokens or terms differ from Lucene's", "",
             "| collection | texts (docs + queries) | Lucene tokens | tokens differ: now | before |"
             " English terms differ: now | before |", "|---|---:|---:|---:|---:|---:|---:|"]
    old_wrong: dict[str, Counter] = {}
    all_texts = {}
    for name in COLLECTIONS:
        docs, queries = texts_of(name)
        all_texts[name] = docs
        checked = check_texts(docs + queries, lucene_analyzer)
        c = checked["counts"]
        old_wrong[name] = checked["wrong"]
        lines.append(f"| {name} | {len(docs):,} + {len(queries):,} | {c['tokens']:,} | {c['ours tokens']} "
                     f"| {c['old tokens']} | {c['ours terms']} | {c['old terms']} |")
    lines += ["", "What the tokenizer before issue 54 got wrong (distinct tokens, texts they occur in):", ""]
    for name, wrong in old_wrong.items():
        shown = ", ".join(f"{side}: {token!r} ({n})" for (side, token), n in wrong.most_common(14))
        lines.append(f"- {name}: {shown or 'nothing'}")
    sample_bad = [name for name, text in MULTILINGUAL.items() if mismatches([text])]
    rng = random.Random(54)
    short, long = random_strings(rng, 20000, 16), random_strings(rng, 400, 700)
    lines += ["", "## Multilingual sample and random strings", "",
              f"Sample cases ({len(MULTILINGUAL)}): {', '.join(MULTILINGUAL)}; differing from Lucene: "
              f"{', '.join(sample_bad) or 'none'}.", "",
              f"Random strings (seed 54) over characters of every word-break class: {len(short):,} of "
              f"1-16 characters, {len(mismatches(short))} differ; {len(long)} of 1-700 (past the 255-unit "
              f"buffer), {len(mismatches(long))} differ."]
    if args.all_code_points:
        found = code_point_differences()
        lines += ["", f"Every code point in {len(CONTEXTS)} contexts: code points where a context differs: "
                  + (", ".join(f"{n:,} {kind}" for kind, n in found.items()) or "none")
                  + ". Lucene's grammar is Unicode 9.0: characters assigned since make tokens here and "
                  "none in Lucene."]
    lines += ["", f"## Speed: seconds for all documents, median of {args.repeats} rounds (round robin)", "",
              "| collection | tokenize before | after | analyse before | after (warm cache, as indexing) |",
              "|---|---:|---:|---:|---:|"]
    for name, docs in all_texts.items():
        t = {k: statistics.median(v) for k, v in speed(docs, args.repeats).items()}
        lines.append(f"| {name} | {t['tokenize before']:.3f} | {t['tokenize after']:.3f} "
                     f"| {t['analyse before']:.3f} | {t['analyse after']:.3f} |")
    publish(RESULTS, "\n".join(lines) + "\n")


if __name__ == "__main__":
    sys.exit(main())
