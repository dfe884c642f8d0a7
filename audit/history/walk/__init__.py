"""The layer walk: an image's history read from its own layers, with no container run.

``walk(spec, context)`` (:mod:`audit.history.walk.run`) reads an image from the engine, a
``docker save`` or OCI layout tarball (or folder), or a registry, and returns the state after
every layer as a :class:`~audit.history.model.History` (producer ``walk``) with the image's
facts. The modules, pure unless named on the history package's ``Edge:`` line:

- ``tarstream``: a tar archive read as it streams; ``layer``: one layer's stream -> its delta
  (``delta``: the facts, JSON round trip); ``blobs``: a layer blob's digests and decompression;
- ``archive``: a ``docker save`` / OCI layout tarball read as it streams; ``layout``: manifests,
  indexes, platform choice; ``config``: the image config, its history -> layer refs;
- ``fold``: deltas in order -> states (whiteouts, environments as Python sees them, the system,
  each state with the environment its history entry left: an ``ENV`` is a state of its own);
  ``loader``: a state's scene for the loader model (``System.loader``, as the in-image
  snapshot records it);
- ``spec``: the image spec; ``source``: what sources share; ``files``: tarballs and layout
  folders;
- edge: ``engine`` (the docker SDK), ``registry`` (the distribution API), ``cache`` (deltas
  and configs on disk), ``run`` (the entry point).
"""
