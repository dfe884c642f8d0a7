"""``python -m audit``: the command line under the nox sessions."""

from audit.cli import main

raise SystemExit(main())
