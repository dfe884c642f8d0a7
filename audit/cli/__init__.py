"""The command line: argparse only, and the only place errors become exit codes.

One module per command, each ``register(subparsers)`` plus one ``handle(args) -> int`` that
builds a frozen options object and makes one call into the package that does the job.
``lock_quick`` answers a ``lock`` on unchanged inputs before anything heavy is imported.
Imports every other package; only ``python -m audit`` imports it.

Edge: (all)
"""
