"""The engines: everything that touches the world.

One process layer (``process``: run and stream, with printing, redaction and one failure
type), the Docker host, one ``container.Container`` for every in-image step, pip-compile and
the lock runner, the build runner and its trail, base images, git sources and atomic writes.
Engines carry out what ``audit.plan`` decided; they may import core and plan, never cli.
"""
