"""The command line: argparse only, and the only place errors become exit codes.

One module per command, listed in ``main.COMMANDS``: its ``HELP``, ``DESCRIPTION`` and
``add_arguments(parser)``, and one ``handle(args, context) -> int`` that builds a frozen options
object and makes one call into the package that does the job; ``context`` is the command's
run context (``context``: project, memo, engine, ``-v``), reports go through ``output``.
``lock_quick`` answers a ``lock`` on unchanged inputs before anything heavy is imported.
Imports every other package; only ``python -m audit`` imports it.

Edge: (all)
"""
