"""The repository judged: ``audit-deps`` at one commit (``audit_deps``) and the pull-request
gate between two (``compare``), images never recorded (``unrecorded``), and their views: the
change view and matrix (``change_view``, ``matrix``), drawn as terminal, HTML and Markdown
(``change_render``, ``plain_table``, ``markdown``) and posted as one comment
(``github_comment``).

Edge: github_comment, images
"""
