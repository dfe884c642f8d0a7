"""The plan: recipes and requirements parsing, render, the lock plan, prediction, audit-deps,
the gate, the build plan and reports.

Decides, never acts: it reads project files through a :class:`~audit.plan.sources.Source` and
returns plain data (files to write, commands to run, findings), but runs no process, talks to
no Docker daemon and writes nothing. It imports ``audit.core`` only; never engines or cli.
"""
