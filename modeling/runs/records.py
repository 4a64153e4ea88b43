"""The files a run leaves beside its model that other commands read, by name: the run's options (train.py and the
fine-tuning scripts write them; model cards and resumed runs read them), the Trainer's progress, the evaluation
results (scripts/evaluate_model.py writes them into the model folder by default; model cards read them), and the record
of an averaged model (scripts/average_checkpoints.py), which the conventions beside its scores state."""

import json
from pathlib import Path


ARGUMENTS_FILE = "arguments.json"  # written by train.py (its run folder and every checkpoint) and the fine-tuning scripts
TRAINER_STATE_FILE = "trainer_state.json"  # the Trainer's progress, in each of its checkpoints and its output folder
RESULTS_FILE = "evaluation_results.json"  # what scripts/evaluate_model.py writes into the model folder by default
AVERAGING_RECORD = "checkpoint_averaging.json"  # beside a model that scripts/average_checkpoints.py averaged


def weights_provenance(model: str) -> str:
    """In words, for the conventions beside a model's scores: the average of which checkpoints, when the model folder
    holds the record of `scripts/average_checkpoints.py`, else the model as given."""
    record_file = Path(model) / AVERAGING_RECORD
    if not record_file.is_file():
        return "the model as given (no checkpoint averaging recorded in it)"
    record = json.loads(record_file.read_text(encoding="utf-8"))
    if None in record["steps"]:  # folders that are not checkpoints of scripts/train.py: named as given
        which = ", ".join(record["checkpoints"])
    else:
        which = "updates " + ", ".join(f"{step:,}" for step in record["steps"])
    return f"the mean of {len(record['checkpoints'])} checkpoints ({which}; scripts/average_checkpoints.py)"


__all__ = ["ARGUMENTS_FILE", "AVERAGING_RECORD", "RESULTS_FILE", "TRAINER_STATE_FILE", "weights_provenance"]
