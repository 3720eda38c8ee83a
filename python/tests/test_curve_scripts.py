"""The readers behind the learning-curve plots (scripts/vit_curve.py, scripts/vq_curve.py), on
small run files written here in the trainers' formats (the plots themselves need matplotlib,
which the tests do not)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from conftest import REPO


def script(name):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_vit_curve_reads_student_and_teacher_runs_and_names_a_bad_file(tmp_path):
    vc = script("vit_curve")
    student, teacher = tmp_path / "student", tmp_path / "teacher"
    student.mkdir()
    teacher.mkdir()
    (student / "state.json").write_text(json.dumps({"epochs_done": 2, "test_accuracy": [0.5, 0.9]}))
    (teacher / "teacher_state.json").write_text(json.dumps({"test_accuracy": [0.25]}))
    assert vc.load(str(student)) == ([50.0, 90.0], False)
    assert vc.load(str(teacher)) == ([25.0], True)
    assert vc.load(str(teacher / "teacher_state.json")) == ([25.0], True)
    for bad, why in [(tmp_path / "missing.json", "No such file"), (tmp_path / "empty", "no state.json")]:
        if bad.name == "empty":
            bad.mkdir()
        with pytest.raises(SystemExit) as e:
            vc.load(str(bad))
        assert str(bad) in str(e.value) and why in str(e.value)
    (tmp_path / "torn.json").write_text('{"test_accuracy": [0.5')
    with pytest.raises(SystemExit, match="torn.json"):
        vc.load(str(tmp_path / "torn.json"))


def write_vq_run(folder, history, seconds):
    folder.mkdir()
    train = {"context_from": 2, "batch_size": 8, "context_batch_size": 2}
    (folder / "train.json").write_text(json.dumps(train))
    (folder / "state.json").write_text(json.dumps({"history": history, "seconds": seconds}))


def test_vq_curve_time_axis_uses_recorded_seconds_else_rebuilds_from_images_per_second(tmp_path):
    vq = script("vq_curve")
    # In runs from 2026-12-02 on every history point carries the run's training seconds: used as they are.
    new = [{"step": s, "psnr": 10.0 + s, "img_per_s": 1.0, "seconds": 360.0 * s} for s in (1, 2, 3)]
    write_vq_run(tmp_path / "new", new, seconds=9999.0)
    xs, ys = vq.training_line(str(tmp_path / "new"))
    assert xs == pytest.approx([0.1, 0.2, 0.3]) and ys == [11.0, 12.0, 13.0]
    # Older runs: time rebuilt from images/s (batch 8 up to context_from, then 2), scaled so the
    # last point lands on the run's total seconds.
    old = [{"step": s, "psnr": 0.0, "img_per_s": 8.0} for s in (1, 2, 3)]
    write_vq_run(tmp_path / "old", old, seconds=720.0)
    xs, _ = vq.training_line(str(tmp_path / "old"))
    # unscaled: 1, 2, 2.25 s (steps 1-2 at batch 8, step 3 at batch 2) → scaled to 720 s.
    assert xs == pytest.approx([720 / 2.25 * t / 3600 for t in (1.0, 2.0, 2.25)])
