"""Reports of findings: one model rendered as a terminal table, JSON and Markdown
(``findings``, ``json_text``), written where the user asked (``output``); the SBOM of a built
stage (``sbom``) and the PEP 751 export (``pylock``, ``pylock_export``).

Edge: output, sbom, pylock_export
"""
