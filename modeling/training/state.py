"""What a training run works with and where it is: `Run`, built once when the run is set up (`engine.set_up`), and
`TrainingProgress`, the place in the run that every checkpoint records and a resume starts from."""

import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from accelerate import Accelerator

from .arguments import TrainDataArguments, TrainModelArguments, TrainArguments
from .batching import TokenBudgetBatches
from .checkpoints import PROGRESS_FILE, describe_value, is_count
from .reporting import MetricsLog
from .seq2seq_data import BpeDropoutEpochs, PreparedData


@dataclass
class TrainingProgress:
    """Where the run is; saved in every checkpoint as JSON (PROGRESS_FILE)."""

    step: int = 0  # updates done
    epoch: int = 0  # epoch of the next batch
    position: int = 0  # index of the next batch within that epoch, in this process's share
    # where the processes' shares of that epoch start in its list of batches: 0, but in an epoch that a run on
    # another number of processes began (TokenBudgetBatches.continue_epoch)
    first_batch: int = 0
    tokens: int = 0  # source + target tokens trained on, all processes
    train_seconds: float = 0.0  # time spent in updates (evaluation and saving excluded)
    # wall time of the run up to its latest checkpoint, summed over the processes that worked on it (set-up,
    # updates, evaluation, saving), so that a resumed run reports the time of the whole run; the work lost between
    # the last checkpoint and a kill is not in it (it was done again)
    wall_seconds: float = 0.0
    best_score: float | None = None
    best_step: int | None = None
    evaluations_without_improvement: int = 0
    # the last update whose evaluation is done and in metrics.jsonl: a run resumed from the checkpoint of that update
    # (one killed right after it was saved) does not evaluate it again, which wrote its line twice
    last_evaluated: int | None = None

    COUNTS = ("step", "epoch", "position", "first_batch", "tokens", "evaluations_without_improvement")
    SECONDS = ("train_seconds", "wall_seconds")

    def state_dict(self) -> dict:
        return asdict(self)

    def load_state_dict(self, state: dict) -> None:
        """Take the values of a checkpoint's record (fields it lacks, from earlier versions, keep their defaults),
        checked first (`problem`)."""
        problem = self.problem(state)
        if problem is not None:
            raise ValueError(f"{PROGRESS_FILE}: {problem}")
        for name, value in state.items():
            setattr(self, name, value)

    @classmethod
    def problem(cls, state, step: int | None = None) -> str | None:
        """What makes `state` unlike any progress a run writes, in words naming the field, its value and what is
        allowed; None if nothing does. `step` is the update the checkpoint is named for, which `state` must be at.
        The bounds that the data set (epoch, batch) are `resuming.position_problem`'s."""
        if not isinstance(state, dict):
            return f"`progress` is {describe_value(state)}; allowed: an object of the fields {list(asdict(cls()))}"
        unknown = sorted(set(state) - set(asdict(cls())))
        if unknown:
            return f"holds unknown fields {unknown}; allowed: {list(asdict(cls()))}"
        for name in cls.COUNTS:
            if name in state and not is_count(state[name]):
                return f"`{name}` is {describe_value(state[name])}; allowed: an integer, 0 or more"
        for name in cls.SECONDS:
            value = state.get(name, 0.0)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
                return f"`{name}` is {describe_value(value)}; allowed: a finite number of seconds, 0 or more"
        if step is not None and state.get("step") != step:
            return (f"`step` is {describe_value(state.get('step'))}; allowed: {step}, the update the checkpoint is "
                    "named for")
        best_score, best_step = state.get("best_score"), state.get("best_step")
        if best_score is not None and (isinstance(best_score, bool) or not isinstance(best_score, (int, float))
                                       or not math.isfinite(best_score)):
            return (f"`best_score` is {describe_value(best_score)}; allowed: a finite number, or null before any "
                    "evaluation")
        if best_step is not None and not (is_count(best_step) and best_step <= state.get("step", 0)):
            return (f"`best_step` is {describe_value(best_step)}; allowed: an update from 0 to `step` "
                    f"({state.get('step', 0)}), or null before any evaluation")
        last_evaluated = state.get("last_evaluated")
        if last_evaluated is not None and not (is_count(last_evaluated) and last_evaluated <= state.get("step", 0)):
            return (f"`last_evaluated` is {describe_value(last_evaluated)}; allowed: an update from 0 to `step` "
                    f"({state.get('step', 0)}), or null before any evaluation")
        if (best_score is None) != (best_step is None):
            return (f"`best_score` is {describe_value(best_score)} and `best_step` {describe_value(best_step)}; "
                    "allowed: both null (before any evaluation) or both set")
        return None


@dataclass
class Run:
    """Everything a training run works with, built once by `engine.set_up`."""

    data: TrainDataArguments
    model_args: TrainModelArguments
    args: TrainArguments
    accelerator: Accelerator
    model: torch.nn.Module  # as prepared by Accelerate (wrapped for DDP / FSDP)
    optimizer: torch.optim.Optimizer
    schedule: torch.optim.lr_scheduler.LRScheduler
    tokenizer: object
    prepared: PreparedData
    batches: TokenBudgetBatches
    accumulation: int  # micro-batches per update, on each process
    progress: TrainingProgress
    metrics: MetricsLog
    score_name: str  # what decides the best model
    resegmented: BpeDropoutEpochs | None  # the training pairs under --bpe_dropout, segmented anew every epoch
    options: dict | None = None  # every option of the run, as saved in arguments.json and in each checkpoint
    lock: int | None = None  # the main process's hold on output_dir (ownership.take_output_dir)
    started: float = 0.0  # time.perf_counter() when this process started the run
    earlier_seconds: float = 0.0  # wall time of the run before this process (from the checkpoint resumed)
    fingerprints: dict | None = None  # of the data and the tokenizer (input_fingerprints), saved in each checkpoint
    # what the updates call: `model` itself, or its loss a chunk of rows at a time (--chunked_loss), compiled
    # (--torch_compile), replayed from CUDA graphs (--cuda_graphs; with --torch_compile, the step too); the same weights
    update_model: torch.nn.Module | None = None

    @property
    def updating_model(self) -> torch.nn.Module:
        """The model the updates call (not `update_model or model`: a compiled module has no truth value)."""
        return self.model if self.update_model is None else self.update_model

    @property
    def output_dir(self) -> Path:
        return Path(self.args.output_dir)

    def wall_seconds(self) -> float:
        return self.earlier_seconds + time.perf_counter() - self.started


__all__ = ["Run", "TrainingProgress"]
