"""data.atomic: atomic file writes and the whole-folder swap (replace_dir)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from data import atomic
from data.atomic import atomic_write_json, replace_dir


def _folder(path: Path, files: dict[str, str]) -> Path:
    path.mkdir(parents=True)
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _contents(path: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(path.iterdir())}


def test_atomic_write_json_leaves_no_temp_file(tmp_path):
    target = tmp_path / "sub" / "a.json"
    atomic_write_json(target, {"b": 1, "a": [1, 2]})
    assert target.read_text() == '{\n  "a": [\n    1,\n    2\n  ],\n  "b": 1\n}\n'
    assert [p.name for p in target.parent.iterdir()] == ["a.json"]


def test_replace_dir_into_a_missing_target(tmp_path):
    staging = _folder(tmp_path / ".bundle.tmp", {"policy.onnx": "new", "manifest.json": "{}"})
    target = tmp_path / "bundle"
    assert replace_dir(staging, target) == target
    assert _contents(target) == {"manifest.json": "{}", "policy.onnx": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]  # no staging, no .old


def test_replace_dir_over_an_existing_target_replaces_it_whole(tmp_path):
    target = _folder(tmp_path / "bundle", {"policy.onnx": "old", "policy.pt": "old only"})
    staging = _folder(tmp_path / ".bundle.tmp", {"policy.onnx": "new"})
    replace_dir(str(staging), str(target))  # plain strings work too
    assert _contents(target) == {"policy.onnx": "new"}  # no file of the old folder survives
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_replace_dir_removes_a_leftover_old_folder_first(tmp_path):
    _folder(tmp_path / ".bundle.old", {"stale": "from a crash"})
    target = _folder(tmp_path / "bundle", {"policy.onnx": "old"})
    staging = _folder(tmp_path / ".bundle.tmp", {"policy.onnx": "new"})
    replace_dir(staging, target)
    assert _contents(target) == {"policy.onnx": "new"}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"]


def test_replace_dir_failures_never_lose_the_old_folder(tmp_path, monkeypatch):
    target = _folder(tmp_path / "bundle", {"policy.onnx": "old"})
    staging = _folder(tmp_path / ".bundle.tmp", {"policy.onnx": "new"})
    real_replace = os.replace
    calls = []

    def failing_replace(src, dst):
        calls.append((Path(src).name, Path(dst).name))
        if len(calls) == fail_at:
            raise OSError("injected")
        real_replace(src, dst)

    monkeypatch.setattr(atomic.os, "replace", failing_replace)
    # The first rename (target aside) fails: nothing moved.
    fail_at = 1
    with pytest.raises(OSError, match="injected"):
        replace_dir(staging, target)
    assert _contents(target) == {"policy.onnx": "old"} and _contents(staging) == {"policy.onnx": "new"}
    # The second rename (staging in) fails: the old folder is whole under .<name>.old.
    calls.clear()
    fail_at = 2
    with pytest.raises(OSError, match="injected"):
        replace_dir(staging, target)
    assert calls == [("bundle", ".bundle.old"), (".bundle.tmp", "bundle")]
    assert not target.exists() and _contents(tmp_path / ".bundle.old") == {"policy.onnx": "old"}
    assert _contents(staging) == {"policy.onnx": "new"}
