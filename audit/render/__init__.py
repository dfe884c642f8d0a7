"""Render: a recipe made into its build context ``build/<image>/`` (``plan`` decides every
file, ``guard`` the guard's half of it, ``write`` writes them).

Edge: write
"""
