"""``python -m audit``: the same command line as the ``layer-audit`` console script.

See :mod:`audit.cli.entry`: a ``lock`` on unchanged inputs is answered from its stamp before
the command line is parsed; everything else goes through :mod:`audit.cli.main`.
"""

import sys

from audit.cli.entry import run

sys.exit(run("python -m audit"))
