from __future__ import annotations

from pathlib import Path

from crossbeat.populator.checkpoint import CheckpointFile


def test_missing_checkpoint_starts_at_zero(tmp_path: Path) -> None:
    assert CheckpointFile(tmp_path / "none.json").load() == 0


def test_save_then_load_in_a_fresh_object(tmp_path: Path) -> None:
    path = tmp_path / "sub" / "cp.json"
    CheckpointFile(path).save(41)
    CheckpointFile(path).save(42)
    assert CheckpointFile(path).load() == 42
    assert not path.with_name("cp.json.tmp").exists()
