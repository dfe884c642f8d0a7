"""Recipes: ``images/<image>/image.toml`` and its ``requirements/*.in`` parsed and validated
once into a frozen :class:`~audit.recipe.model.Recipe` (``parse``, ``located_toml``,
``requirements_in``, ``policy_parse`` for the ``[policy]`` table, ``repins`` for no-deps
re-pins).

Edge: (none)
"""
