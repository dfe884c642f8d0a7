"""What runs inside images: the build guard, the snapshot script and the pip-tools lock driver.

Standard library only, Python 3.9 syntax; each is copied into an image (or a work folder) and
run there by path, never imported from the package by code running on the host, except by
tests, by the resolvers that copy it (``audit.lock.resolvers.piptools``) and by the layer walk,
which reads metadata with the snapshot script's own pure parsers (``audit.history.walk``: the
walk and the guard agree byte for byte). The guard imports
the vendored pure modules (``audit/render/guard.py``'s ``VENDORED``).

Edge: (all)
"""
