"""An image's history: the state after every layer and what changed between two states.

The model (``model``: layer states and histories; ``snapshot``: Python environments;
``system``: OS packages and native libraries; ``diff``: typed changes; ``debversion``) is pure
and vendored into images for the guard. Its producers: ``predict`` (from the locks, no
Docker), the in-build guard (``audit/inimage/guard.py``), the layer walk (``walk``: an image's
own layers, no container), and, for one final state, ``image_audit`` (a container) and
``host_snapshot`` (an interpreter here). ``snapshot_diff`` judges two snapshot files.

Edge: host_snapshot, image_audit, walk.cache, walk.engine, walk.registry, walk.run
"""
