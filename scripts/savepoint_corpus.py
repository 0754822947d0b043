"""Write the checkpoint compatibility corpus (``tests/savepoints/corpus``; the cases are in
``tests/savepoints/corpus_cases.py``): per case, the checkpoint after the first step, a
savepoint of it and the second step's output. Run from the repository's root, once per
new operator or case; never to paper over a change that no longer restores a case (that
change ships a migration instead)::

    python scripts/savepoint_corpus.py [case ...]
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.savepoints.corpus_cases import (
    CASES,
    CORPUS,
    PLACEHOLDER,
    Case,
    normalized,
    relocate,
)
from tests.streaming.harness import StepRunner

from headrace.savepoints import create
from headrace.savepoints.manifest import MANIFEST, Manifest
from headrace.spark.session import local_session
from headrace.testing import EmbeddedBroker


def write(case: Case, runner_for: object, work: Path) -> None:
    """Run ``case``'s first step, keep the checkpoint and a savepoint of it, then run the
    second step on a copy and record its output."""
    out = CORPUS / case.name
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    checkpoint = work / case.name
    runner = runner_for(case, checkpoint)  # type: ignore[operator]
    runner.run(case.steps[0], key=case.key)
    shutil.copytree(checkpoint, out / "checkpoint")
    if case.restore is None:  # else: an operator replaced since, no savepoint kept
        create(runner.spark, checkpoint, out / "savepoint")
        manifest = Manifest.from_json((out / "savepoint" / MANIFEST).read_text())
        # no machine's paths in the corpus
        text = manifest.to_json().replace(json.dumps(str(checkpoint)), '"checkpoint"')
        (out / "savepoint" / MANIFEST).write_text(text)
    rows = runner.run(case.steps[1], key=case.key)
    (out / "expected.json").write_text(json.dumps(normalized(rows), indent=0,
                                                  sort_keys=True) + "\n")
    for crc in (out / "checkpoint").rglob("*.crc"):
        crc.unlink()
    relocate(out / "checkpoint", str(checkpoint), PLACEHOLDER)


def main(names: list[str]) -> None:
    with EmbeddedBroker() as broker, tempfile.TemporaryDirectory() as tmp:
        spark = local_session("headrace-corpus")
        spark.conf.set("spark.sql.shuffle.partitions", "2")

        def runner_for(case: Case, checkpoint: Path) -> StepRunner:
            return StepRunner(spark, broker, case.topic, case.schema,
                              lambda df: case.build(df, None), checkpoint, partitions=2,
                              event_time="ts" if "ts" in case.schema else "event_time")
        try:
            for case in CASES:
                if not names or case.name in names:
                    write(case, runner_for, Path(tmp))
                    print(f"wrote {case.name}")
        finally:
            spark.stop()


if __name__ == "__main__":
    main(sys.argv[1:])
