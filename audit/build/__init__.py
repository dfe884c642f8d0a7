"""Build: a recipe's BuildKit builds with the guard (``plan`` decides them, ``run`` runs
them, ``progress`` reads BuildKit's output, ``trail`` keeps what the guard wrote,
``provenance`` gathers the labels, ``prelude`` builds a Python-less base's prelude for
``lock``).

Edge: run, progress, trail, provenance, prelude
"""
