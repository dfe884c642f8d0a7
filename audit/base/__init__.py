"""Base images: offline Debian bases (``offline`` decides, ``make`` builds), replicas of a
vendor base (``replica_plan``, ``replica``), the base record (``record``, ``snapshot_file``)
and the check before layer 1 that the engine has the recorded base (``check``).

Edge: make, replica, record, check
"""
