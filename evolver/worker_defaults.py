"""The defaults of ``kernevo worker``'s options, apart from ``evolver.worker``.

``kernevo``'s parser shows them in its help; importing ``evolver.worker`` for them imported
OpenEvolve and SQLAlchemy for every command, ``--help`` included (about 0.8 s).
"""

from __future__ import annotations

# Defaults: a heartbeat every 10 s; a job whose heartbeat is 90 s old (db.heartbeat's
# STALE_AFTER_S, the age at which ``kernevo jobs`` shows a job stale) has lost its worker; a job
# given up after its third worker died under it (a job that kills its workers must not loop).
DEFAULT_HEARTBEAT_S = 10.0
DEFAULT_GRACE_S = 90.0
DEFAULT_POLL_S = 2.0
DEFAULT_MAX_ATTEMPTS = 3
# The grace period must hold this many missed heartbeats, so that one slow database write or a
# busy host does not hand a live job to a second worker. The reaper also waits for as many of
# each job's own recorded beats: db.heartbeat.MISSED_BEATS, which this equals (a test pins it;
# written out so that the parser imports no SQLAlchemy).
MIN_BEATS_PER_GRACE = 3
