"""The `retrieval` subcommands: one module per feature, each with `add(subparsers)`, which
registers its subcommands and the handler each runs (`run(args)`, or e.g. `run_add` in update.py).

Handlers turn parsed flags into plain library calls; no library code sees an
argparse Namespace. cli.py registers COMMANDS in this order (the help order).
"""

from retrieval.commands import (
    ask,
    evaluate,
    experiment,
    features,
    index,
    info,
    rerank,
    search,
    serve,
    train,
    update,
)

COMMANDS = (index, update, search, evaluate, info, experiment, rerank, features, train, ask, serve)
