"""The command line: argparse only, and the only place errors become exit codes.

One module per command, each ``register(subparsers)`` plus one ``handle(args) -> int`` that
builds a frozen options object and makes one call into plan or engines. ``lock_quick``
answers a ``lock`` on unchanged inputs before anything heavy is imported. May import every
other wing.
"""
