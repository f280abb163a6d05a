"""The `retrieval` subcommands: one module per feature, each with `add(subparsers)` and `run(args)`.

Handlers turn parsed flags into plain library calls; no library code sees an
argparse Namespace. cli.py registers COMMANDS in this order (the help order).
"""

from retrieval.commands import ask, evaluate, experiment, index, info, rerank, search, serve, train, update

COMMANDS = (index, update, search, evaluate, info, experiment, rerank, train, ask, serve)
