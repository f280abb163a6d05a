"""Named test collections in the data directory, and resolving names or paths.

A collection is named (`cacm`, `scifact`, `vaswani`, `cranfield`; `xquad-open`,
the passages of the question-answering sets) and topics
and qrels take an optional split (`scifact:train`; the default is the test
split). Anything that is not a known name is treated as a path. The
question-answering sets (`xquad-en`, `squad2-dev` and their splits) are named
the same way (`load_examples`).

The data directory comes from `--data-dir`, else `$RETRIEVAL_DATA`, else
`../shared/data` beside the working directory or beside this checkout.
"""

from __future__ import annotations

import hashlib
import os
import re
import tarfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from retrieval.errors import InputError
from retrieval.formats import read_documents, read_qrels, read_topics
from retrieval.formats.html import read_html_tarball
from retrieval.formats.jsonl import read_beir_queries, read_jsonl_documents
from retrieval.formats.smart import read_cranfield_qrels, read_smart_documents, read_smart_queries
from retrieval.formats.squad import Example, exclude_paragraphs, passage_documents, read_squad
from retrieval.formats.textfile import check_id, decode
from retrieval.formats.trec import check_topic_field, only_text, read_trec_documents, read_trec_topics
from retrieval.types import Document, Qrels, Queries

DATA_ENV = "RETRIEVAL_DATA"
_override: Path | None = None


def set_data_dir(path: str | Path | None) -> None:
    """Use `path` as the data directory for this process (the `--data-dir` flag)."""
    global _override
    _override = Path(path) if path else None


def data_dir() -> Path:
    """Where named collections live: flag, then environment, then ../shared/data."""
    if _override is not None:
        return _override
    if os.environ.get(DATA_ENV):
        return Path(os.environ[DATA_ENV])
    repo = Path(__file__).resolve().parent.parent
    for candidate in (Path.cwd().parent / "shared" / "data", repo.parent / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    return repo.parent / "shared" / "data"


def _tar_member(archive: Path, name: str) -> str:
    try:
        with tarfile.open(archive) as tar:
            return decode(tar.extractfile(name).read(), f"{archive}!{name}")
    except (KeyError, tarfile.TarError, OSError) as e:
        raise InputError(f"cannot read {name} from archive ({e})", archive) from None


def _beir_split(root: Path, split: str) -> Queries:
    qrels = read_qrels(root / "qrels" / f"{split}.tsv")
    queries = read_beir_queries(root / "queries.jsonl")
    return Queries((q, t) for q, t in queries.items() if q in qrels)


@dataclass(frozen=True)
class Collection:
    """How to read one named collection's documents, topics and qrels."""

    name: str
    documents: Callable[[Path], Iterator[Document]]
    topics: dict[str, Callable[[Path], Queries]]
    qrels: dict[str, Callable[[Path], Qrels]]
    remove_query_ids: bool = False  # BEIR: a query's own id is never a hit
    default_split: str = "test"
    measures: tuple[str, ...] = field(default=("MAP", "P@30", "nDCG@10"))
    directory: str | None = None  # its folder in the data directory (default: its name; "" the root)


_CACM_DATE = re.compile(r"^CACM\s+(?:[A-Za-z]+,?\s+)?(\d{4})\s*$", re.M)


def _cacm_fields(documents: Iterator[Document]) -> Iterator[Document]:
    """CACM's pages with their parts as fields: `title` (the first paragraph), `text` (the page, as
    indexed flat), and metadata `year` and `venue` from the "CACM December, 1958" line."""
    for doc in documents:
        paragraphs = [p for p in re.split(r"\n\s*\n", doc.fields.get("raw", "")) if p.strip()] \
            if doc.fields else []
        title = " ".join(paragraphs[0].split()) if paragraphs else ""
        date = _CACM_DATE.search(doc.fields.get("raw", "")) if doc.fields else None
        meta = {"venue": "CACM", **({"year": int(date.group(1))} if date else {})}
        yield Document(doc.id, doc.title, doc.text, {"title": title}, meta)


def _cran(name: str) -> Callable[[Path], str]:
    return lambda root: _tar_member(root / "cran.tar.gz", name)


COLLECTIONS: dict[str, Collection] = {
    "cacm": Collection(
        "cacm",
        documents=lambda root: _cacm_fields(read_html_tarball(root / "cacm.tar.gz", raw=True)),
        topics={"test": lambda root: read_trec_topics(root / "topics.cacm.txt")},
        qrels={"test": lambda root: read_qrels(root / "qrels.cacm.txt")},
    ),
    "scifact": Collection(
        "scifact",
        documents=lambda root: read_jsonl_documents(root / "corpus.jsonl.gz"),
        topics={s: (lambda root, s=s: _beir_split(root, s)) for s in ("test", "train")},
        qrels={s: (lambda root, s=s: read_qrels(root / "qrels" / f"{s}.tsv")) for s in ("test", "train")},
        remove_query_ids=True,
        measures=("nDCG@10", "R@100", "R@1000", "MAP"),
    ),
    "vaswani": Collection(
        "vaswani",
        documents=lambda root: read_trec_documents(root / "doc-text.trec"),
        topics={"test": lambda root: read_trec_topics(root / "query-text.trec")},
        qrels={"test": lambda root: read_qrels(root / "qrels")},
    ),
    "cranfield": Collection(
        "cranfield",
        documents=lambda root: read_smart_documents(root / "cran.tar.gz!cran.all.1400",
                                                    _cran("cran.all.1400")(root)),
        topics={"test": lambda root: read_smart_queries(root / "cran.tar.gz!cran.qry",
                                                        text=_cran("cran.qry")(root))},
        qrels={"test": lambda root: read_cranfield_qrels(root / "cran.tar.gz!cranqrel",
                                                         _cran("cranqrel")(root))},
    ),
}


def _squad_passages(root: Path) -> Iterator[Document]:
    return passage_documents([root / "xquad-en" / "xquad.en.json", root / "squad2-dev" / "dev-v2.0.json"])


# Open-domain QA: every distinct paragraph of xquad-en and squad2-dev (questions come from the
# SQuAD files themselves; see retrieval.qa), so `retrieval index --collection xquad-open --dense`
# builds the passage index `retrieval ask` reads.
COLLECTIONS["xquad-open"] = Collection("xquad-open", documents=_squad_passages, topics={}, qrels={},
                                       directory="")


def split_name(spec: str) -> tuple[str, str | None]:
    """'scifact:train' -> ('scifact', 'train'); 'cacm' -> ('cacm', None)."""
    name, _, split = str(spec).partition(":")
    return name, split or None


def removes_query_ids(topics: str | Path) -> bool:
    """Whether runs for these topics drop each query's own id by default (named BEIR topics)."""
    collection = named(topics, files_only=True)
    return bool(collection and collection.remove_query_ids)


def named(spec: str | Path, *, files_only: bool = False) -> Collection | None:
    """The named collection `spec` refers to, or None when it is a path. With `files_only` (topics,
    qrels: never a directory) a directory of that name, such as an index built as `--index scifact`,
    does not hide the collection."""
    name, _ = split_name(str(spec))
    path = Path(str(spec))
    shadowed = path.is_file() if files_only else path.exists()
    return COLLECTIONS.get(name) if not shadowed else None


def drops_self_hits(topics: str | Path) -> bool:
    """Whether runs over the named topics drop each query's own document (the collection's
    `remove_query_ids`, e.g. ArguAna, Quora); False for topic files."""
    collection = named(topics, files_only=True)
    return bool(collection and collection.remove_query_ids)


def _root(collection: Collection) -> Path:
    root = data_dir() / (collection.name if collection.directory is None else collection.directory)
    if not root.is_dir():
        raise InputError(f"collection {collection.name!r} not found in the data directory; set "
                         f"--data-dir or ${DATA_ENV}", root)
    return root


def _split(collection: Collection, spec: str, table: dict) -> Callable:
    split = split_name(spec)[1] or collection.default_split
    if split not in table:
        raise InputError(f"collection {collection.name!r} has no split {split!r}; expected one of "
                         + ", ".join(sorted(table)))
    return table[split]


def check_source(spec: str | Path) -> Path:
    """Where the collection `spec` names is (its file or directory); InputError now, before any
    work, when it is not there."""
    collection = named(spec)
    if collection is not None:
        return _root(collection)
    if not Path(spec).exists():
        raise InputError("not found; expected a collection name (" + ", ".join(sorted(COLLECTIONS))
                         + ") or a file or directory of documents", spec)
    return Path(spec)


def load_documents(spec: str | Path) -> Iterator[Document]:
    """Documents of a named collection or a collection file/directory, ids checked (checked_ids)."""
    collection = named(spec)
    if collection is None:
        return checked_ids(read_documents(spec), Path(spec), located=True)
    root = _root(collection)
    return checked_ids(collection.documents(root), root)


def checked_ids(documents: Iterable[Document], source: Path, located: bool = False) -> Iterator[Document]:
    """Pass documents through, refusing an empty or spaced id or one seen before (naming the record;
    `located`: `source` is what read_documents read, so a duplicate is named at its file and line)."""
    seen: set[str] = set()
    for n, doc in enumerate(documents, 1):
        try:
            check_id(doc.id, f"document {n}: id", source)
        except InputError:
            if located:
                _check_id_at_its_file(doc.id, source)
            raise
        if doc.id in seen:
            raise _duplicate(doc.id, n, source, located)
        seen.add(doc.id)
        yield doc


def _check_id_at_its_file(doc_id: str, source: Path) -> None:
    """check_id again, reporting at the document's own file (and line) when `source` is a directory
    (found by a second pass over it, as for a duplicate)."""
    from retrieval.formats import document_places

    for file, line in document_places(source, doc_id)[:1] if Path(source).is_dir() else []:
        check_id(doc_id, "id", file, line)


def _duplicate(doc_id: str, n: int, source: Path, located: bool) -> InputError:
    """The error for a repeated id: at its file and line, with the first (found by a second pass over
    the collection at `source` when `located`); otherwise by its position in the collection."""
    from retrieval.formats import document_places

    where = document_places(source, doc_id) if located else []
    if len(where) >= 2:
        (first, line), (file, again) = where[:2]
        first_at = f"{first}:{line}" if line is not None else str(first)
        return InputError(f"duplicate document id {doc_id!r} (first at {first_at}); ids must be unique",
                          file, again)
    return InputError(f"document {n}: duplicate document id {doc_id!r}; ids must be unique", source)


def load_topics(spec: str | Path, field: str = "title") -> Queries:
    """Topics of a named collection (optionally `name:split`) or a topics file."""
    check_topic_field(field)
    collection = named(spec, files_only=True)
    if collection is None:
        return read_topics(spec, field)
    only_text(field, f"the topics of the collection {collection.name!r}", str(spec))
    return _split(collection, str(spec), collection.topics)(_root(collection))


def load_qrels(spec: str | Path) -> Qrels:
    """Qrels of a named collection (optionally `name:split`) or a qrels file."""
    collection = named(spec, files_only=True)
    if collection is None:
        return read_qrels(spec)
    return _split(collection, str(spec), collection.qrels)(_root(collection))


def describe(spec: str | Path) -> str:
    """A stable description of where a collection comes from (for manifests): its name, or for a
    file or directory its own name and a SHA-256 of its contents, never the machine's path to it."""
    collection = named(spec)
    if collection:
        return f"collection:{collection.name}"
    path = Path(spec)
    return f"file:{path.name}#sha256:{_content_sha256(path)}" if path.exists() else f"file:{path.name}"


def _content_sha256(path: Path) -> str:
    """SHA-256 of a file, or of a directory's files (relative names and contents, in name order)."""
    from retrieval.storage import sha256_file

    if path.is_file():
        return sha256_file(path)
    digest = hashlib.sha256()
    for item in sorted(p for p in path.rglob("*") if p.is_file() or p.is_symlink()):
        if not item.exists():
            raise InputError("broken symbolic link in the collection", item)
        name = os.fsencode(item.relative_to(path).as_posix())  # a name need not be UTF-8
        digest.update(name + f"\0{sha256_file(item)}\n".encode())
    return digest.hexdigest()


# ---------------------------------------------------------------- question-answering sets

QA_SETS = {"xquad-en": "xquad-en/xquad.en.json", "squad2-dev": "squad2-dev/dev-v2.0.json"}
VALIDATION_ARTICLES = 3  # squad2-dev articles held out for choosing settings (split_articles)


def split_articles(examples: Sequence[Example], n: int) -> tuple[list[Example], list[Example]]:
    """(training, validation): the validation set is every question of `n` articles, the articles
    whose title has the smallest SHA-256 (a fixed, content-blind choice)."""
    titles = sorted({ex.title for ex in examples}, key=lambda t: hashlib.sha256(t.encode()).hexdigest())
    if n >= len(titles):
        raise InputError(f"cannot hold out {n} of the {len(titles)} articles left for training")
    held = set(titles[:n])
    validation = [ex for ex in examples if ex.title in held]
    if all(ex.impossible for ex in validation):  # closed-setting F1 is over answerable questions only
        raise InputError(f"the {n} held-out article(s) have no answerable question to choose an epoch by;"
                         " hold out more articles")
    return [ex for ex in examples if ex.title not in held], validation


def load_examples(spec: str | Path) -> list[Example]:
    """A SQuAD file, or a named set in the data directory with an optional split:

    - `xquad-en` (the evaluation set, 1,190 questions) and `xquad-en:unseen` (its questions
      from the 32 articles of which squad2-dev, the training data, has no paragraph);
    - `squad2-dev:train` / `squad2-dev:validation`: squad2-dev without any xquad-en
      paragraph, split by article (VALIDATION_ARTICLES held out, chosen by title hash);
      `squad2-dev` alone is the whole file.
    """
    name, _, split = str(spec).partition(":")
    if name not in QA_SETS or Path(str(spec)).exists():
        return read_squad(spec)
    root = data_dir()
    examples = read_squad(root / QA_SETS[name])
    if not split:
        return examples
    if name == "xquad-en" and split == "unseen":
        seen = {ex.title for ex in read_squad(root / QA_SETS["squad2-dev"])}
        return [ex for ex in examples if ex.title not in seen]
    if name == "squad2-dev" and split in ("train", "validation"):
        kept = exclude_paragraphs(examples, read_squad(root / QA_SETS["xquad-en"]))
        return split_articles(kept, VALIDATION_ARTICLES)[split == "validation"]
    raise InputError(f"unknown QA set {str(spec)!r}; expected xquad-en, xquad-en:unseen, squad2-dev,"
                     " squad2-dev:train, squad2-dev:validation or a SQuAD file")
