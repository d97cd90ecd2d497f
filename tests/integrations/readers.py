"""Independent readers of what each logger wrote: the backends' own file formats."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Any

#: The .wandb file: a 7-byte header (":W&B", a key, a version), then LevelDB-log records
#: (crc32, length, type; FULL=1, FIRST=2, MIDDLE=3, LAST=4) in blocks of 32 KiB.
WANDB_BLOCK = 32768
WANDB_HEADER = 7


def wandb_records(path: Path) -> list[Any]:
    """Every protobuf record of an offline W&B run file."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B", path
    pos, chunk, out = WANDB_HEADER, b"", []
    while pos + 7 <= len(data):
        left = WANDB_BLOCK - pos % WANDB_BLOCK
        if left < 7:  # a block's tail too short for a record header is padding
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        chunk += data[pos + 7 : pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(chunk)
            out.append(record)
            chunk = b""
    return out


def wandb_run(folder: Path) -> dict[str, Any]:
    """The offline runs under ``folder``: id -> {config, group, name, history rows}."""
    runs: dict[str, Any] = {}
    for path in sorted(folder.glob("wandb/offline-run-*/run-*.wandb")):
        for record in wandb_records(path):
            kind = record.WhichOneof("record_type")
            if kind == "run":
                run = runs.setdefault(record.run.run_id, {"history": [], "files": set()})
                run["files"].add(path.parent.name)
                run["group"], run["name"] = record.run.run_group, record.run.display_name
                run["config"] = {u.key: json.loads(u.value_json) for u in record.run.config.update}
                current = run
            elif kind == "history":
                row = {
                    "/".join(i.nested_key) or i.key: json.loads(i.value_json)
                    for i in record.history.item
                }
                current["history"].append(row)
    return runs


def tensorboard_scalars(folder: Path) -> dict[str, list[tuple[int, float]]]:
    """tag -> [(step, value)] of a TensorBoard run folder, as TensorBoard reads it."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


def tensorboard_text(folder: Path, tag: str) -> str:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder), size_guidance={"tensors": 0})
    acc.Reload()
    event = acc.Tensors(f"{tag}/text_summary")[0]
    return event.tensor_proto.string_val[0].decode()


def mlflow_client(folder: Path) -> Any:
    import mlflow

    os.environ["MLFLOW_ALLOW_FILE_STORE"] = "true"
    try:
        return mlflow.MlflowClient(tracking_uri=folder.resolve().as_uri())
    finally:
        os.environ.pop("MLFLOW_ALLOW_FILE_STORE", None)
