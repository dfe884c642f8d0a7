"""Locks: one hash-pinned lock per pip layer under ``locks/<image>/``. Their format
(``format``, ``files``), which are stale and why (``plan``, ``trust``), stand-ins for what the
base installed (``standins``), and the lock run itself (``workflow`` -> ``run`` -> the
``resolvers``), its stamp, progress and summary.

Edge: run, workflow, stamp, progress, view, index_origin, resolvers
"""
