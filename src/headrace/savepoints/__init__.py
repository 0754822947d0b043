"""Savepoints: a stateful query's state, offsets, watermark and sink markers, written to a
self-describing, versioned folder, and new queries started from it.

``create(spark, checkpoint, output)`` writes one from a stopped or running query's
checkpoint (as of its last committed batch; module ``create``); ``Savepoint(path)`` reads
one; the toolkit's operators and the pipelines take ``from_savepoint=`` and start from its
state with a fresh checkpoint, their sources at its offsets. What may change in between:
the number of shuffle partitions, the headrace version (state schema versions and
``migrations``) and parameters the state does not depend on; a changed key or window is
refused before anything starts (``IncompatibleStateError``). The real-time path's
exactly-once sink's replay records travel in the savepoint too (``replay``), so its output
stays exactly once across the switch. ``headrace savepoint create|inspect`` is the command
line.
"""

from __future__ import annotations

from headrace.savepoints import migrations
from headrace.savepoints.create import create
from headrace.savepoints.errors import IncompatibleStateError, SavepointError
from headrace.savepoints.manifest import FORMAT_VERSION, Manifest, Operator, read_manifest
from headrace.savepoints.savepoint import Savepoint
from headrace.savepoints.state import Resume

__all__ = ["FORMAT_VERSION", "IncompatibleStateError", "Manifest", "Operator", "Resume",
           "Savepoint", "SavepointError", "create", "migrations", "read_manifest"]
