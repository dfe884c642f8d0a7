"""Render: a recipe made into its build context ``build/<image>/`` (``plan`` decides every
file, ``guard`` the guard's half of it, ``write`` writes them, ``packaging_copy`` picks the
``packaging`` the guard carries: fetched once for an old Python).

Edge: write, packaging_copy
"""
