"""``python -m audit``: the command line under the nox sessions.

``lock`` on unchanged inputs is answered from its verified-fresh stamp before the command line
is even parsed (:mod:`audit.cli.lock_fast` imports only os, sys and sha256); every other run, and
every miss, goes through :mod:`audit.cli.main`.
"""

import sys

from audit.cli.lock_fast import quick_exit

code = quick_exit(sys.argv[1:])
if code is None:
    from audit.cli.main import main

    code = main()
raise SystemExit(code)
