"""The judge: the policy of a recipe (``model``, ``presets``), every rule's name (``rules``),
and the findings it turns changes and states into (``findings``, ``verdict``,
``system_rules``). Every producer of a history is judged here, and every renderer displays
these findings as they are. Pure, standard library and ``packaging`` only, Python 3.9 syntax:
the build guard runs these modules inside images (``audit/render/guard.py`` vendors them).

Edge: (none)
"""
