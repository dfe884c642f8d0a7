"""This machine: every external program (``process``), the two consoles (``console``), writes
that never leave half a file and run locks (``atomic``).

Edge: (all)
"""
