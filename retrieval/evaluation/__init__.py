"""Evaluating runs against qrels: measures through ir-measures, and significance tests."""
