"""The core: pure data and rules. Snapshot model, lock format, diff, policy, verdict, findings,
errors.

Standard library plus ``packaging`` only, no I/O beyond what a caller hands in, and Python
3.9-clean: these modules are vendored into every build context and run inside images by the
guard. The core imports nothing else of ``audit``; every other wing may import it.
"""
