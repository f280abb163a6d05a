"""REALM-style retrieve-then-read question answering.

p(y | x) = sum_z p(y | z, x) p(z | x): dense top-k passages weighted by a
softmax over retrieval scores, an extractive span reader, answers
aggregated by SQuAD-normalised string, each with its evidence.
"""

from retrieval.formats.squad import Example, read_questions, read_squad
from retrieval.qa.marginal import Answer, Evidence, marginalise, passage_probs
from retrieval.qa.metrics import evaluate, normalize_answer
from retrieval.qa.pipeline import RetrieveThenRead, best_answers
from retrieval.qa.reader import Reading, Span, SpanReader, span_distribution

__all__ = ["Answer", "Evidence", "Example", "Reading", "RetrieveThenRead", "Span", "SpanReader",
           "best_answers", "evaluate", "marginalise", "normalize_answer", "passage_probs",
           "read_questions", "read_squad", "span_distribution"]
