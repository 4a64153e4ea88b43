"""The checkpoint the publishing tests publish (a run's output folder, with files that must not be published) and its
dry-run folder, each made once per test module."""

import json

import pytest
import torch

from helpers import spread_weights, tiny_config
from hub_helpers import REPO_ID, RESULTS, push_to_hub
from vaswani import VaswaniForConditionalGeneration


@pytest.fixture(scope="module")
def checkpoint(tokenizer, tmp_path_factory):
    """A training run's output folder: the model, its tokenizer, its results file, and files that must not be
    published (an optimizer state, a log)."""
    folder = tmp_path_factory.mktemp("run")
    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), source_lang="en", target_lang="de"))
    spread_weights(model).eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    (folder / "evaluation_results.json").write_text(json.dumps(RESULTS))
    (folder / "optimizer.pt").write_bytes(b"not for the Hub")
    (folder / "train.log").write_text("step 1 loss 9.9\n")
    return folder


@pytest.fixture(scope="module")
def dry_run_folder(checkpoint, tmp_path_factory):
    output = tmp_path_factory.mktemp("dry") / "repo"
    push_to_hub.main(["--model", str(checkpoint), "--repo_id", REPO_ID, "--dry-run", "--output_dir", str(output),
                      "--training_data", "Ten sentence pairs written for the tests."])
    return output
