"""``python -m audit``: the command line under the nox sessions.

``lock`` on unchanged inputs is answered from its verified-fresh stamp before the command line
is even parsed (:mod:`audit.lock_stamp` imports only os, sys and sha256); every other run, and
every miss, goes through :mod:`audit.cli`.
"""

import sys

from audit.lock_stamp import quick_exit

code = quick_exit(sys.argv[1:])
if code is None:
    from audit.cli import main

    code = main()
raise SystemExit(code)
