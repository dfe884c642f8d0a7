"""Package indexes: GET requests (``http``), simple API pages (``simple``), a wheel's
metadata by HTTP range requests (``remote_zip``, ``wheel_metadata``), and the files the
pylock export names (``files``).

Edge: (all)
"""
