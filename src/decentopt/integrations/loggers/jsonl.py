"""JSON lines: one file per run, one object per line, readable with nothing but ``json``.

``FOLDER/GROUP/NAME.jsonl`` holds ``{"event": "start", "run", "group", "params"}``, then
``{"event": "scalars", "step", "values"}`` per step, ``{"event": "figure", "name",
"path"}`` and ``{"event": "finish"}``. A resumed run keeps its file: the lines of steps
after ``resumed_from`` (logged before an interruption) are dropped, and a ``start`` line
with ``resumed_from`` opens the continuation, so that each step appears once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import IO, Any

from decentopt._process import atomic_file
from decentopt.integrations.loggers.base import Logger, RunInfo, safe_name

__all__ = ["JsonLinesLogger", "read_jsonl"]


def read_jsonl(path: str | Path) -> list[dict[str, Any]]:
    """Every object of a JSON-lines file (an unfinished last line left out)."""
    out = []
    for line in Path(path).read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            break  # the last line of a process killed while writing
    return out


class JsonLinesLogger(Logger):
    """Runs as JSON-lines files under ``folder`` (``jsonl:FOLDER``)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.file: IO[str] | None = None

    def start(self, run: RunInfo) -> None:
        group = self.folder / safe_name(run.group) if run.group else self.folder
        path = group / f"{safe_name(run.name)}.jsonl"
        kept = []
        if run.resumed_from and path.exists():
            kept = [e for e in read_jsonl(path) if e.get("step", 0) <= run.resumed_from]
        with atomic_file(path) as f:  # the kept lines, replaced in one rename
            f.writelines(json.dumps(e) + "\n" for e in kept if e.get("event") != "finish")
        self.file = path.open("a")
        self.write(
            {"event": "start", "run": run.name, "group": run.group, "params": run.params}
            | ({"resumed_from": run.resumed_from} if run.resumed_from else {})
        )

    def write(self, entry: dict[str, Any]) -> None:
        assert self.file is not None, "start a run first"
        self.file.write(json.dumps(entry) + "\n")
        self.file.flush()

    def scalars(self, step: int, values: dict[str, float]) -> None:
        self.write({"event": "scalars", "step": int(step), "values": values})

    def figure(self, name: str, path: Path) -> None:
        self.write({"event": "figure", "name": name, "path": str(path)})

    def finish(self) -> None:
        if self.file is not None:
            self.write({"event": "finish"})
            self.file.close()
            self.file = None
