"""Dockerfiles: ``import`` turns one into a recipe (``importer`` walks it; ``run``,
``files``, ``config``, ``heredoc`` and ``state`` map its instructions), honouring the build
context's ``.dockerignore`` (``dockerignore``).

Edge: dockerignore
"""
