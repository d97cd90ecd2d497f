from __future__ import annotations

from decentopt.experiments.scaling import TRANSIENT_EXPONENT, transient_rows
from decentopt.experiments.store import ResultStore


def test_each_transient_measurement_is_noted_once_in_the_store(tmp_path):
    """In one process (``jobs=1``) as in workers, every measurement of the transient is one
    entry of the store's ``ran`` on the first run and of ``kept`` on the rerun (which the
    study reports as ``resumed: N``)."""
    quiet = lambda _: None  # noqa: E731
    names = {f"transient-ring{m}-{name}" for m in (6, 8, 12) for name in TRANSIENT_EXPONENT}
    first = ResultStore(tmp_path)
    rows = transient_rows(2, True, quiet, first, jobs=1)
    assert sorted(first.ran) == sorted(names) and not first.kept
    again = ResultStore(tmp_path)
    same = transient_rows(2, True, quiet, again, jobs=1)
    assert sorted(again.kept) == sorted(names) and not again.ran
    assert same == rows
