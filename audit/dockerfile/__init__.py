"""Dockerfiles: ``import`` turns one into a recipe (``importer`` walks it; ``layout`` lays its
stages out as recipe stages, a Python-less base's prelude included; ``run``, ``pip``,
``flags``, ``files``, ``args``, ``config`` and ``heredoc`` map its instructions; ``bases``
knows a base's CUDA and Python; ``state`` holds the walk; ``plan`` is the result and writes
``image.toml``), honouring the build context's ``.dockerignore`` (``dockerignore``); ``stages``
attributes a built image's history to the Dockerfile's stages and lines.

Edge: dockerignore
"""
