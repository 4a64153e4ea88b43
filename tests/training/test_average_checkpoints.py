"""scripts/average_checkpoints.py: the mean of a run's last checkpoints, loadable, with the record of what it
averaged."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from helpers import load_script
from vaswani.runs.records import AVERAGING_RECORD, weights_provenance
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
    record = json.loads((averaged / AVERAGING_RECORD).read_text())
    assert record["steps"] == [6, 8]
    assert weights_provenance(str(averaged)) == (
        "the mean of 2 checkpoints (updates 6, 8; scripts/average_checkpoints.py)")
    assert "no checkpoint averaging" in weights_provenance(str(output_dir / "last"))
    with pytest.raises(ValueError, match="either --run_dir"):
        average_checkpoints.main(["--output_dir", str(tmp_path / "x")])


def test_checkpoints_of_other_tokenizers_or_configs_are_refused_and_nothing_is_written(tokenizer, tmp_path):
    """The mean of checkpoints whose tokenizers differ was saved with one of them (some ids then stand for other
    tokens); that of checkpoints whose configs differ, with a config that is not the others'."""
    from vaswani import VaswaniForConditionalGeneration, VaswaniTokenizer
    from helpers import PAIRS, tiny_config

    def save(folder, tokenizer, **config):
        VaswaniForConditionalGeneration(tiny_config(vocab_size=700, **config)).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        return folder

    other_tokenizer = VaswaniTokenizer.train_from_texts([de for _, de in PAIRS] * 3, vocab_size=500, min_frequency=1)
    first = save(tmp_path / "first", tokenizer)
    cases = {
        "tokenizer": (save(tmp_path / "other-tokenizer", other_tokenizer), "has another tokenizer than"),
        "config": (save(tmp_path / "other-config", tokenizer, activation_function="gelu"),
                   "is not a checkpoint of the model of .*: config.json's activation_function is 'gelu', not 'relu'"),
    }
    for folder, refusal in cases.values():
        with pytest.raises(ValueError, match=f"{folder} {refusal}"):
            average_checkpoints.main(["--checkpoints", str(first), str(folder), "--output_dir", str(tmp_path / "out")])
        assert not (tmp_path / "out").exists()
