"""The project checkout: where things live (``paths``), reading its files from the work tree
or a git ref (``sources``, ``gitsource``), which command a hint names (``frontdoor``), what
``init`` writes (``scaffold``) and where this layer-audit came from (``self_spec``).

Edge: gitsource, self_spec
"""
