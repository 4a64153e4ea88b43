"""scripts/average_checkpoints.py: the mean of a run's last checkpoints, loadable, with the record of what it
averaged."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from helpers import load_script
from vaswani.training import checkpoints as checkpoints_module

average_checkpoints = load_script("average_checkpoints")
pytestmark = pytest.mark.usefixtures("one_thread")


def test_average_checkpoints_is_the_mean_and_loads(finished_run, tmp_path):
    output_dir, _ = finished_run
    averaged = average_checkpoints.main(["--run_dir", str(output_dir), "--last", "2", "--output_dir",
                                         str(tmp_path / "averaged")])
    model = AutoModelForSeq2SeqLM.from_pretrained(averaged)
    AutoTokenizer.from_pretrained(averaged)
    six, eight = (load_file(checkpoints_module.checkpoint_path(output_dir / "checkpoints", s) / "model" /
                            "model.safetensors") for s in (6, 8))
    weights = model.state_dict()
    for name in six:
        torch.testing.assert_close(weights[name], (six[name] + eight[name]) / 2)
    assert not torch.equal(six["model.shared.weight"], eight["model.shared.weight"])
    # the averaged model says what it is, for the conventions beside its scores
    record = json.loads((averaged / checkpoints_module.AVERAGING_RECORD).read_text())
    assert record["steps"] == [6, 8]
    assert checkpoints_module.weights_provenance(str(averaged)) == (
        "the mean of 2 checkpoints (updates 6, 8; scripts/average_checkpoints.py)")
    assert "no checkpoint averaging" in checkpoints_module.weights_provenance(str(output_dir / "last"))
    with pytest.raises(ValueError, match="either --run_dir"):
        average_checkpoints.main(["--output_dir", str(tmp_path / "x")])
