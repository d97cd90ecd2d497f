"""MLflow: one MLflow run per run, in the experiment named after its group (``mlflow:URI``).

``URI`` is a tracking URI (``http://...``, ``sqlite:///...``) or a folder, which becomes
MLflow's file store (``file:`` URI; MLflow keeps it in maintenance, so it is allowed for
this logger's calls only). Runs carry the tag ``decentopt.run`` (group/name): a resumed
run (``resumed_from > 0``) finds its run by the tag and continues it, skipping the steps
it logged before the interruption. Hyper-parameters are MLflow params, figures artifacts
under ``figures/``. Needs ``pip install decentopt[mlflow]`` (``mlflow-skinny`` suffices).
"""

from __future__ import annotations

import os
import re
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from decentopt.integrations.loggers.base import Logger, RunInfo, needs

try:
    import fcntl
except ImportError:  # not POSIX: parallel workers may not share a file store there
    fcntl = None  # type: ignore[assignment]

__all__ = ["MlflowLogger", "tracking_uri"]

#: The tag that names a run across restarts.
RUN_TAG = "decentopt.run"
#: MLflow refuses longer parameter values.
PARAM_CHARS = 6000


def tracking_uri(target: str) -> str:
    """A tracking URI as given, or a folder as a ``file:`` URI."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target) and not re.match(r"^[A-Za-z]:\\", target):
        return target
    return Path(target).expanduser().resolve().as_uri()


@contextmanager
def _file_store(uri: str) -> Iterator[None]:
    """For the calls inside: MLflow's file store allowed (the setting restored after) and a
    ``file:`` store's folder locked, exclusively (other stores: no lock)."""
    before = os.environ.get("MLFLOW_ALLOW_FILE_STORE")
    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        if not uri.startswith("file:") or fcntl is None:
            yield
            return
        folder = Path(urllib.request.url2pathname(urllib.parse.urlparse(uri).path))
        folder.mkdir(parents=True, exist_ok=True)
        with (folder / ".decentopt.lock").open("a") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)  # released as the file closes
            yield
    finally:
        if before is None:
            os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
        else:
            os.environ["MLFLOW_ALLOW_FILE_STORE"] = before


class MlflowLogger(Logger):
    """Runs as MLflow runs at ``target`` (a tracking URI or a folder)."""

    def __init__(self, target: str) -> None:
        self.mlflow = needs("mlflow", "mlflow", "the mlflow logger")
        self.uri = tracking_uri(target or "mlruns")
        self.client: Any = None
        self.run_id = ""
        self.after = -1  # steps up to this one were logged before a resume

    def _experiment(self, name: str) -> str:
        """The client and the experiment ``name``'s id, created if new (by whichever of
        parallel workers comes first: in a file store, under :func:`_file_store`'s lock, as
        it checks names without one, and its client makes the default experiment of a new
        folder)."""
        self.client = self.mlflow.MlflowClient(tracking_uri=self.uri)
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return self.client.create_experiment(name)
        except self.mlflow.exceptions.MlflowException:
            found = self.client.get_experiment_by_name(name)  # another worker made it
            if found is None:
                raise
            return found.experiment_id

    def start(self, run: RunInfo) -> None:
        with _file_store(self.uri):
            experiment = self._experiment(run.group or "decentopt")
            query = f"tags.`{RUN_TAG}` = '{run.key}'"
            newest = ["attributes.start_time DESC"]
            earlier = self.client.search_runs([experiment], query, order_by=newest)
        self.after = -1
        if run.resumed_from and earlier:
            self.run_id = earlier[0].info.run_id
            self.client.update_run(self.run_id, status="RUNNING")
            history = self.client.get_metric_history(self.run_id, "lr")
            self.after = max((m.step for m in history), default=-1)
            return
        tags = {RUN_TAG: run.key, "mlflow.runName": run.key}
        self.run_id = self.client.create_run(experiment, tags=tags).info.run_id
        params = [
            self.mlflow.entities.Param(k, str(v)[:PARAM_CHARS]) for k, v in run.params.items()
        ]
        self.client.log_batch(self.run_id, params=params)

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if step <= self.after:
            return
        now = int(time.time() * 1000)
        Metric = self.mlflow.entities.Metric
        metrics = [Metric(k, float(v), now, int(step)) for k, v in values.items()]
        self.client.log_batch(self.run_id, metrics=metrics)

    def figure(self, name: str, path: Path) -> None:
        self.client.log_artifact(self.run_id, str(path), "figures")

    def finish(self) -> None:
        if self.run_id:
            self.client.set_terminated(self.run_id)
            self.run_id = ""
