"""What a W&B user sees of a run, read back from the offline run file (LevelDB-style log of protobuf records):
tags, the config as dotted keys, ``round`` as every chart's step, the rows, and the two images."""

import os
import struct

import pytest

from conftest import TINY, compose

from fedbench.engine.simulation import Simulation
from fedbench.logging.run_logger import RunLogger

pb = pytest.importorskip("wandb.proto.wandb_internal_pb2")


def _records(path, block=32768):
    """The protobuf records of a .wandb file: a 7-byte file header, then LevelDB log records (crc32, length,
    type: 1 full, 2 first, 3 middle, 4 last) in 32 KiB blocks."""
    raw = path.read_bytes()
    pos, buf, out = 7, b"", []
    while pos + 7 <= len(raw):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        length, kind = struct.unpack("<HB", raw[pos + 4: pos + 7])
        if kind == 0 and length == 0:
            break
        data = raw[pos + 7: pos + 7 + length]
        pos += 7 + length
        buf = data if kind in (1, 2) else buf + data
        if kind in (1, 4):
            record = pb.Record()
            record.ParseFromString(buf)
            out.append(record)
    return out


def test_wandb_offline_run_has_tags_dotted_config_round_steps_and_images(tmp_path):
    os.environ["WANDB_SILENT"] = "true"
    cfg = compose(*TINY, "logger=wandb", "participation=markov", "algo=fedavgm")
    logger = RunLogger(tmp_path / "run", cfg)
    Simulation(cfg, tmp_path / "run", tmp_path / "data").run(logger)
    logger.finish()
    import wandb

    wandb.teardown()  # the shared W&B service writes the run file asynchronously: wait until it has exited
    (path,) = (tmp_path / "run" / "wandb").glob("offline-run-*/run-*.wandb")
    records = _records(path)
    kinds = [r.WhichOneof("record_type") for r in records]
    run = next((r.run for r in records if r.WhichOneof("record_type") == "run"), None)
    assert run is not None, f"no run record in {path} ({path.stat().st_size} bytes): {kinds}"
    assert set(run.tags) >= {"algo:fedavgm", "dataset:digits", "partition:iid", "participation:markov"}
    config = {item.key for r in records if r.WhichOneof("record_type") in ("run", "config")
              for item in (r.run.config.update if r.WhichOneof("record_type") == "run" else r.config.update)}
    assert {"algo.name", "participation.availability.kind", "client.lr", "seed"} <= config
    metrics = [r.metric for r in records if r.WhichOneof("record_type") == "metric"]
    assert any(m.glob_name == "*" and m.step_metric == "round" for m in metrics)
    keys = set()
    for r in records:
        if r.WhichOneof("record_type") == "history":
            keys |= {item.key or "/".join(item.nested_key) for item in r.history.item}
    assert {"round", "test_acc", "test_loss", "round/selected", "round/available"} <= keys
    assert {"partition/label_histogram/_type", "participation/trace/_type"} <= keys  # the two images
    assert "summary" in kinds
