"""What a run records is what it did: train.py refuses, before it trains, a mixed precision that its device would not
apply or that Accelerate does not know (the run would compute in fp32 and record fp16, or "fp8x"), and a --resume
whose --max_steps lies before the run's update (it republished best/ and last/ and recorded "reached max_steps=10" at
update 20)."""

import pytest

from helpers import snapshot
from training_helpers import REPORT_TO, copy_of, run_in_process, tiny_argv
from vaswani.runs.errors import TrainingError


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("given, source", [
    ({"mixed_precision": "fp16"}, "--mixed_precision fp16"),
    ({"ACCELERATE_MIXED_PRECISION": "fp16"}, "ACCELERATE_MIXED_PRECISION=fp16"),
])
def test_fp16_on_a_cpu_is_refused_instead_of_recorded(given, source, tmp_path, monkeypatch):
    options = {name: value for name, value in given.items() if name == "mixed_precision"}
    for name, value in given.items():
        if name.isupper():
            monkeypatch.setenv(name, value)
    with pytest.raises(TrainingError) as refused:
        run_in_process(tiny_argv(tmp_path / "run", **options))
    assert str(refused.value).startswith(f"{source}: fp16 does not apply on a CPU")
    assert "\n" not in str(refused.value)
    assert not (tmp_path / "run").exists()  # refused before the folder was touched


def test_a_mixed_precision_accelerate_does_not_know_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_MIXED_PRECISION", "fp8x")
    with pytest.raises(TrainingError, match=r"^ACCELERATE_MIXED_PRECISION=fp8x: not a mixed precision; allowed: no, "
                                            r"fp16, bf16, fp8\.$"):
        run_in_process(tiny_argv(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_resuming_with_max_steps_before_the_runs_update_is_refused_and_nothing_changes(finished_run, tmp_path):
    run = copy_of(finished_run[0], tmp_path)
    before = snapshot(run)
    with pytest.raises(TrainingError, match=r"--resume: the run is at update 8 \(.*step-00000008\), beyond "
                                            r"--max_steps 4: there is nothing to train"):
        run_in_process(tiny_argv(run, report_to=REPORT_TO, resume=True, max_steps=4))
    after = snapshot(run)
    assert {key: value for key, value in after.items() if key != ".run.lock"} == {
        key: value for key, value in before.items() if key != ".run.lock"}
