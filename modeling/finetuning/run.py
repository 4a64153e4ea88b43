"""One fine-tuning run on the standard `Trainer` path: parsing the command line, the checks before anything is
loaded, the checkpoint to resume from, the callbacks and settings a Vaswani model needs under the Trainer, and the
train -> save -> evaluate sequence, which a stop signal (SIGTERM, SIGUSR1: `vaswani.runs.preemption`) ends
after the update under way, with a checkpoint to resume from."""

import copy
import json
import logging
import os
import sys
from dataclasses import asdict
from fnmatch import fnmatch
from pathlib import Path

import datasets
import torch
import transformers
from transformers import HfArgumentParser, PreTrainedModel, Trainer, TrainerCallback, TrainingArguments, set_seed
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR, get_last_checkpoint

from ..cli import (
    FRACTION,
    POSITIVE,
    SEED,
    Allowed,
    at_least,
    check_numbers,
    parse_config_overrides,
    require_folder_or_hub_id,
)
from ..data.arguments import TrainingDataArguments
from ..data.loading import split_paths
from ..output_paths import check_output_dir, write_text_atomically
from ..runs.launch_status import processes_apart
from ..runs.ownership import release_output_dir, take_output_dir
from ..runs.preemption import RESUMABLE, StoppedBySignal, StopSignals
from ..runs.records import ARGUMENTS_FILE, TRAINER_STATE_FILE
from ..safe_loading import check_trainer_checkpoint, read_json_record
from .head_loading import ModelArguments


logger = logging.getLogger(__name__)

RESUME_LATEST = ("last", "latest", "true", "True")


def start_run(task_arguments, argv: list[str] | None, training_arguments=TrainingArguments):
    """Parse the command line into (model, data, task, training) arguments, set up logging, check that the run
    makes sense and seed everything."""
    parser = HfArgumentParser((ModelArguments, TrainingDataArguments, task_arguments, training_arguments))
    model_args, data_args, task_args, training_args = parser.parse_args_into_dataclasses(args=argv)
    check_numbers((model_args, data_args, task_args, training_args), NUMBER_RULES)
    _check_training_length(training_args)
    setup_logging(training_args)
    check_run(training_args)
    _check_paths(model_args, data_args, training_args)
    _check_resumed_inputs((model_args, data_args, task_args), training_args)
    _take_output_dir(training_args)
    _stop_at_once_while_setting_up(training_args)
    set_seed(training_args.seed)
    return model_args, data_args, task_args, training_args


# A stop signal (SIGTERM, SIGUSR1) while a run is being set up (data, tokenizer, model: nothing trained yet) stops it at
# once with this line and the resumable exit status, 75; from `train_and_evaluate` on, the Trainer saves first.
SET_UP_STOP = ("while the run was being set up, before its first update: nothing was trained, so nothing is lost; "
               "the same command starts it again")
_set_up_signals: dict[str, StopSignals] = {}  # --output_dir -> its set-up's signals, until its training starts


def _stop_at_once_while_setting_up(training_args: TrainingArguments) -> None:
    signals = StopSignals(at_once=SET_UP_STOP)
    _set_up_signals[str(Path(training_args.output_dir))] = signals.__enter__()


def _set_up_done(training_args: TrainingArguments) -> None:
    signals = _set_up_signals.pop(str(Path(training_args.output_dir)), None)
    if signals is not None:
        signals.__exit__(None, None, None)


# What the numeric options of a fine-tuning run allow, ours and those of TrainingArguments that it takes as given
# (torch's optimizer, the data loader and numpy's seeding would refuse some later, with messages that name no option;
# others would silently change the run). Every other one is a finite number of its type (vaswani.cli.check_numbers).
NUMBER_RULES = {
    **dict.fromkeys(
        ("max_length", "max_source_length", "max_target_length", "per_device_train_batch_size",
         "per_device_eval_batch_size", "gradient_accumulation_steps", "generation_max_length", "generation_num_beams"),
        POSITIVE,
    ),
    "max_train_samples": at_least(1, meaning="unset: every row"),
    "max_eval_samples": at_least(1, meaning="unset: every row"),
    "seed": SEED,
    "data_seed": SEED,
    "learning_rate": at_least(0, integer=False),  # 0 is torch's too: a run that keeps the weights as loaded
    "adam_beta1": FRACTION,
    "adam_beta2": FRACTION,
    "adam_epsilon": Allowed(minimum=0, above=True),
    "weight_decay": at_least(0, integer=False),
    "max_grad_norm": at_least(0, integer=False, meaning="0 turns clipping off"),
    "label_smoothing_factor": FRACTION,
    "warmup_steps": at_least(0, integer=False, meaning="a whole number of updates, or a fraction of the run below 1"),
    "dataloader_num_workers": at_least(0, meaning="0 loads in the main process"),
    # 0 would never save until the end (a kill loses the run), a negative count never evaluate or log
    **dict.fromkeys(("save_steps", "eval_steps", "logging_steps"),
                    Allowed(minimum=0, above=True, meaning="updates, or a fraction of the run below 1")),
}


def _check_training_length(training_args: TrainingArguments) -> None:
    """A training run makes at least one update (the Trainer takes --max_steps 0 as zero updates, and a negative
    --max_steps as "--num_train_epochs decides"), and its warmup is a fraction of the run or a whole number of
    updates within it where --max_steps gives the run's length (else `WarmupWithinRun` checks it at the start)."""
    max_steps, epochs = training_args.max_steps, training_args.num_train_epochs
    if max_steps != -1 and max_steps < 1:
        raise ValueError(f"--max_steps must be a whole number >= 1, or -1 (the default: --num_train_epochs decides); "
                         f"got {max_steps}.")
    if training_args.do_train and max_steps == -1 and epochs <= 0:
        raise ValueError(f"--num_train_epochs {epochs:g} with --max_steps -1 would train no update: give "
                         "--num_train_epochs > 0, or --max_steps >= 1.")
    warmup = training_args.warmup_steps
    if warmup >= 1 and warmup != int(warmup):
        raise ValueError(f"--warmup_steps must be a whole number of updates, or a fraction of the run below 1; got "
                         f"{warmup:g}.")
    if training_args.do_train and max_steps >= 1:
        _check_warmup_within(warmup, max_steps, f"--max_steps {max_steps}")


def _check_warmup_within(warmup: float, updates: int, run: str) -> None:
    """A warmup of whole updates no longer than the run's `updates` (`run` says where that number comes from)."""
    if warmup >= 1 and warmup > updates:
        raise ValueError(f"--warmup_steps {warmup:g} is longer than the run ({updates} updates, from {run}): the "
                         "learning rate would never reach --learning_rate. Give at most that many updates, or a "
                         "fraction of the run below 1.")


class WarmupWithinRun(TrainerCallback):
    """Refuse, before the first update, a warmup longer than a run whose length --num_train_epochs decides (the
    Trainer knows it only once it has the data)."""

    def on_train_begin(self, args, state, control, **kwargs):
        _check_warmup_within(args.warmup_steps, state.max_steps, f"--num_train_epochs {args.num_train_epochs:g}")


def setup_logging(training_args: TrainingArguments) -> None:
    """Log to stdout. This project's messages (labels, the loading report) at info level from the main process and
    warnings from the others; transformers and datasets at the level `--log_level` / `--log_level_replica` give."""
    logging.basicConfig(
        format="%(asctime)s %(levelname)s %(name)s: %(message)s", handlers=[logging.StreamHandler(sys.stdout)]
    )
    ours = logging.INFO if training_args.should_log else logging.WARNING
    logging.getLogger("vaswani").setLevel(ours)
    logging.getLogger("__main__").setLevel(ours)
    level = training_args.get_process_log_level()
    datasets.utils.logging.set_verbosity(level)
    transformers.utils.logging.set_verbosity(level)


def check_run(training_args: TrainingArguments) -> None:
    """Fail early on a run that would do nothing, or that would silently run as unrelated single processes."""
    if not (training_args.do_train or training_args.do_eval):
        raise ValueError("Nothing to do: pass --do_train and/or --do_eval.")
    apart = processes_apart(training_args.world_size, f"world_size={training_args.world_size}",
                            "pass --use_cpu true (or set ACCELERATE_USE_CPU=1)")
    if apart is not None:
        raise ValueError(apart)
    # a checkpoint that is not there, or that holds what is never loaded, is an error now, not after loading everything
    checkpoint = resume_checkpoint(training_args)
    if checkpoint is not None:
        check_trainer_checkpoint(checkpoint)
        _check_progress_to_resume(Path(checkpoint), training_args)


def _check_progress_to_resume(checkpoint: Path, training_args: TrainingArguments) -> None:
    """The checkpoint's progress (trainer_state.json) is one a run writes, and leaves updates to train before
    --max_steps (with --num_train_epochs: `UpdatesLeftToTrain`): resumed at or beyond its end, the Trainer trains
    nothing (or one update at learning rate 0) and saves the old weights as the final model, overwriting the run's
    results, with exit status 0."""
    state = json.loads((checkpoint / TRAINER_STATE_FILE).read_text(encoding="utf-8"))
    step, planned = state.get("global_step"), state.get("max_steps")
    where = f"--resume_from_checkpoint {checkpoint}: {TRAINER_STATE_FILE}'s"
    for name, value in (("global_step", step), ("max_steps", planned)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"{where} {name} is {value!r}; allowed: a whole number >= 0, as the Trainer writes it.")
    if step > planned:
        raise ValueError(f"{where} global_step {step} is beyond its run's own max_steps {planned}: not a checkpoint "
                         "a run wrote. Resume from another checkpoint, or start over in a new --output_dir.")
    named = checkpoint.name.removeprefix(f"{PREFIX_CHECKPOINT_DIR}-")
    if named.isdigit() and int(named) != step:
        raise ValueError(f"{where} global_step {step} is not the update its folder is named for ({checkpoint.name}).")
    if 0 < training_args.max_steps <= step:  # with --num_train_epochs, the run's length is known from the data
        raise ValueError(f"--resume_from_checkpoint {checkpoint} is at update {step}, and --max_steps "
                         f"{training_args.max_steps} leaves nothing to train: the run is finished. Raise --max_steps "
                         "to continue it, or evaluate its model with scripts/evaluate_model.py.")


class UpdatesLeftToTrain(TrainerCallback):
    """Refuse, before the first update, a resumed run that has nothing left to train (its length, with
    --num_train_epochs, known once the Trainer has the data): the Trainer would train nothing, or one update at
    learning rate 0, and save the checkpoint's weights as the final model over the run's results."""

    def on_train_begin(self, args, state, control, **kwargs):
        if args.resume_from_checkpoint is not None and state.global_step >= state.max_steps:
            raise ValueError(
                f"--resume_from_checkpoint {args.resume_from_checkpoint}: the run is at update {state.global_step}, "
                f"and --num_train_epochs {args.num_train_epochs:g} makes it {state.max_steps} updates long: the run "
                "is finished, nothing is left to train. Raise --num_train_epochs (or --max_steps) to continue it, or "
                "evaluate its model with scripts/evaluate_model.py."
            )


def _check_paths(model_args: ModelArguments, data_args: TrainingDataArguments, training_args: TrainingArguments) -> None:
    """The model and tokenizer folders are there (or are Hub ids), and --output_dir, where the Trainer saves
    the model and its checkpoints and deletes the older ones, stays apart from them and from the data files
    (vaswani.output_paths)."""
    if model_args.model_name_or_path is not None:
        require_folder_or_hub_id(model_args.model_name_or_path, "--model_name_or_path")
    if model_args.tokenizer_name is not None:
        require_folder_or_hub_id(model_args.tokenizer_name, "--tokenizer_name", needed_file="tokenizer_config.json")
    check_output_dir(training_args.output_dir, {
        "--model_name_or_path": model_args.model_name_or_path,
        "--tokenizer_name": model_args.tokenizer_name,
        "--train_file": split_paths(data_args.train_file or ""),
        "--validation_file": split_paths(data_args.validation_file or ""),
    })
    if Path(training_args.output_dir).is_dir() and resume_checkpoint(training_args) is None:
        # before anything is written there (and again under the lock)
        _refuse_an_earlier_run(Path(training_args.output_dir))


# --- the inputs a resumed run continues with ------------------------------------------------------------------


# The options of a run's model, data and task (arguments.json's "model", "data" and "task") that a resumed run may
# change: which rows it is evaluated on. Every other one decides what it trains (the base model, the tokenizer, the
# training data, its columns, labels and lengths), and is recorded in each checkpoint (`RecordInputsInCheckpoints`).
CHANGEABLE_ON_RESUME = ("validation_file", "validation_split", "max_eval_samples", "trust_remote_code")
PATH_OPTIONS = ("model_name_or_path", "tokenizer_name", "train_file")  # compared as the files they name


def run_record(arguments: tuple) -> dict:
    """arguments.json's record of a run's model, data and task options (`arguments`: their dataclasses)."""
    return {"script": Path(sys.argv[0]).name,
            **{kind: asdict(value) for kind, value in zip(("model", "data", "task"), arguments)}}


def _check_resumed_inputs(arguments: tuple, training_args: TrainingArguments) -> None:
    """A run resumed from a checkpoint (`--resume_from_checkpoint`) goes on with the base model, tokenizer, data and
    task options that checkpoint was trained with (its arguments.json): another --train_file or
    --model_name_or_path would be trained on without a word, and arguments.json (and so the model card) would name
    only the last command's inputs. One line names each option that differs; a checkpoint of an earlier version,
    without the record, is resumed with a warning."""
    checkpoint = resume_checkpoint(training_args)
    if checkpoint is None:
        return
    record_file = Path(checkpoint) / ARGUMENTS_FILE
    if not record_file.is_file():
        logger.warning(f"--resume_from_checkpoint {checkpoint}: the checkpoint records no options ({ARGUMENTS_FILE}; "
                       "written by an earlier version), so the base model and data could not be checked to be the "
                       "run's.")
        return
    saved = read_json_record(record_file)
    current = run_record(arguments)
    changed = []
    for kind in ("model", "data", "task"):
        before = saved.get(kind) if isinstance(saved.get(kind), dict) else {}
        for name, value in current[kind].items():
            if name in CHANGEABLE_ON_RESUME or name not in before or _same_option(name, before[name], value):
                continue
            changed.append(f"--{name} {before[name]!r} -> {value!r}")
    if changed:
        raise ValueError(
            f"--resume_from_checkpoint {checkpoint}: these options differ from those of the run it continues (what "
            f"was -> what is): {'; '.join(changed)}. The run would go on training another model or on other data, "
            f"and its record would name only this command's. Give the run's values (its {record_file}), or start a "
            f"new run in another --output_dir. Options that may change on resume: {', '.join(CHANGEABLE_ON_RESUME)}."
        )


def _same_option(name: str, saved, current) -> bool:
    """Paths are the same where they name the same files (`./a.jsonl`, `a.jsonl`); config overrides where they set
    the same fields to the same values."""
    if saved == current:
        return True
    if name == "config_overrides" and isinstance(saved, str) and isinstance(current, str):
        try:
            return parse_config_overrides(saved) == parse_config_overrides(current)
        except ValueError:
            return False
    if name in PATH_OPTIONS and isinstance(saved, str) and isinstance(current, str):
        resolved = [[os.path.realpath(part) for part in split_paths(value)] for value in (saved, current)]
        return resolved[0] == resolved[1]
    return False


class RecordInputsInCheckpoints(TrainerCallback):
    """Write the run's model, data and task options (`run_record`) into each checkpoint the Trainer saves, as
    arguments.json, which a resumed run checks its own against (`_check_resumed_inputs`)."""

    def __init__(self, arguments: tuple):
        self.record = json.dumps(run_record(arguments), indent=2, default=str) + "\n"

    def on_save(self, args, state, control, **kwargs):
        folder = Path(args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"
        if state.is_world_process_zero and folder.is_dir():
            write_text_atomically(folder / ARGUMENTS_FILE, self.record)
        return control


# What a fine-tuning run writes into --output_dir (the Trainer's files and this project's): finding any of them means
# that a run, or a model, is there already, which this run would replace.
RUN_FILES = (f"{PREFIX_CHECKPOINT_DIR}-*", TRAINER_STATE_FILE, "all_results.json", "train_results.json",
             "eval_results.json", ARGUMENTS_FILE, "config.json", "*.safetensors", "tokenizer.json", "training_args.bin")
_output_dir_locks: dict[str, int] = {}  # --output_dir -> the main process's hold on it, until the run ends


def _take_output_dir(training_args: TrainingArguments) -> None:
    """One run per --output_dir (vaswani.runs.ownership's lock, held by the main process until the run ends),
    and none that would replace an earlier run or a model there: only one that resumes it may write there (checked
    under the lock, so that of two runs started together on a new folder the second is refused)."""
    if training_args.process_index != 0:
        return
    folder = Path(training_args.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    lock, note = take_output_dir(folder)
    _output_dir_locks[str(folder)] = lock
    if note:
        logger.warning(f"{note}; taking the folder over.")
    try:
        if resume_checkpoint(training_args) is None:
            _refuse_an_earlier_run(folder)
    except BaseException:
        _release_output_dir(training_args)
        raise


def _refuse_an_earlier_run(folder: Path) -> None:
    found = sorted(path.name for path in folder.iterdir() if any(fnmatch(path.name, name) for name in RUN_FILES))
    if found:
        shown = ", ".join(found[:4]) + (f" and {len(found) - 4} more" if len(found) > 4 else "")
        raise FileExistsError(
            f"--output_dir {folder} already holds a run or a model ({shown}), which this run would replace. Continue "
            "that run with --resume_from_checkpoint last, or choose another --output_dir."
        )


def _release_output_dir(training_args: TrainingArguments) -> None:
    lock = _output_dir_locks.pop(str(Path(training_args.output_dir)), None)
    if lock is not None:
        release_output_dir(lock)


def loss_is_a_batch_mean(trainer: Trainer) -> Trainer:
    """Tell `Trainer` that a Vaswani model's loss is the plain mean over its batch.

    Their `forward` takes `**kwargs` (attention options), which `Trainer` reads as "normalizes the loss by
    `num_items_in_batch` itself"; it would then skip the division by the gradient-accumulation steps and multiply
    the loss by the number of processes, making the gradients that many times too large. A model that declares
    `accepts_loss_kwargs` is left as it says.
    """
    model = trainer.accelerator.unwrap_model(trainer.model)
    if getattr(model.config, "model_type", None) == "vaswani" and not hasattr(model, "accepts_loss_kwargs"):
        trainer.model_accepts_loss_kwargs = False
    return trainer


class KeepGenerationConfig(TrainerCallback):
    """Give the model back the generation config it started with after each evaluation.

    `Seq2SeqTrainer.prediction_step` fills the model's generation config with every default of transformers (among
    them `max_length=20`), and the checkpoints and the final model were saved with it: every later `generate()` with
    `max_new_tokens` then warned that both limits were set. The config a checkpoint is saved with is the one it was
    loaded with, plus what the run set on purpose before training. It is put back after each evaluation batch too:
    the filled-in `max_length=20` made every batch after the first warn the same during evaluation."""

    def __init__(self, model: PreTrainedModel):
        self.generation_config = copy.deepcopy(getattr(model, "generation_config", None))

    def on_evaluate(self, args, state, control, model=None, **kwargs):
        if model is not None and self.generation_config is not None:
            model.generation_config = copy.deepcopy(self.generation_config)

    on_prediction_step = on_evaluate


class SaveAndStopOnSignal(TrainerCallback):
    """On a stop signal during `trainer.train()`: at the end of the update under way, the Trainer saves a checkpoint
    (`control.should_save`) and stops (`control.should_training_stop`), every process after the same update (they
    agree through one small reduction per update when there are several). Any evaluation due at that update runs
    first, as it would have: the checkpoint then holds the same best score as in a run that was not stopped."""

    def __init__(self, accelerator, signals: StopSignals):
        self.accelerator, self.signals = accelerator, signals
        self.stopped_at: int | None = None  # the update after which the run stopped

    def on_step_end(self, args, state, control, **kwargs):
        if self.signals.received_by_any_process(self.accelerator):
            control.should_save = control.should_training_stop = True
            self.stopped_at = state.global_step
        return control

    def on_epoch_end(self, args, state, control, **kwargs):
        # stopped inside an epoch: the end-of-epoch evaluation and save that follow the Trainer's early exit from the
        # epoch would not have happened here, and would overwrite the checkpoint with a different best score
        if self.stopped_at is not None and not float(state.epoch).is_integer():
            control.should_evaluate = control.should_save = False
        return control


def _train_or_stop(trainer: Trainer, training_args: TrainingArguments, signals: StopSignals):
    """`trainer.train()`, resuming where asked; a stop signal (`signals`) ends it after the update under way, with
    a checkpoint: StoppedBySignal."""
    stopping = SaveAndStopOnSignal(trainer.accelerator, signals)
    trainer.add_callback(stopping)
    try:
        outcome = trainer.train(resume_from_checkpoint=resume_checkpoint(training_args))
    finally:
        trainer.remove_callback(stopping)
    if stopping.stopped_at is None:
        return outcome
    end_process_group()
    folder = Path(training_args.output_dir) / f"{PREFIX_CHECKPOINT_DIR}-{stopping.stopped_at}"
    raise StoppedBySignal(
        f"stopped by {signals.describe()} after update {stopping.stopped_at}: its checkpoint {folder} holds the run "
        f"so far; the same command with --resume_from_checkpoint last continues it ({RESUMABLE})."
    )


def end_process_group() -> None:
    """The Trainer leaves the process group up; left to the interpreter's exit, gloo's threads sometimes abort the
    process after the run is done ("terminate called without an active exception", exit -6 under torchrun). Every
    process calls this at the same point. The barrier lets gloo's threads finish with the last collective first: a
    group destroyed while one of its threads waits for the interpreter lock to let go of that collective's tensors
    deadlocks (seen when a stop signal ends training right after the Trainer's gather of the loss)."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        torch.distributed.barrier()
        torch.distributed.destroy_process_group()


def resume_checkpoint(training_args: TrainingArguments) -> str | None:
    """The Trainer checkpoint to resume from: `--resume_from_checkpoint PATH`, or `last` for the newest
    `checkpoint-*` folder in `--output_dir`."""
    value = training_args.resume_from_checkpoint
    if value is None or not training_args.do_train:
        return None
    if value in RESUME_LATEST:
        latest = get_last_checkpoint(training_args.output_dir) if Path(training_args.output_dir).is_dir() else None
        if latest is None:
            raise ValueError(
                f"--resume_from_checkpoint {value}: there is no checkpoint-* folder in --output_dir "
                f"{training_args.output_dir} to resume from."
            )
        return latest
    if not (Path(value) / TRAINER_STATE_FILE).is_file():
        raise ValueError(
            f"--resume_from_checkpoint {value}: not a Trainer checkpoint (a checkpoint-* folder with "
            f"{TRAINER_STATE_FILE})."
        )
    return value


def _save_trained_model(trainer: Trainer, training_args: TrainingArguments, arguments: tuple) -> None:
    """The model and tokenizer in --output_dir, the Trainer's state, and arguments.json (see train_and_evaluate)."""
    trainer.save_model()
    trainer.save_state()
    if trainer.is_world_process_zero():
        record = run_record(arguments)
        record["training"] = training_args.to_dict()  # tokens are masked by transformers
        write_text_atomically(Path(training_args.output_dir) / ARGUMENTS_FILE,
                              json.dumps(record, indent=2, default=str) + "\n")


def argmax_logits(logits, labels):
    """`preprocess_logits_for_metrics`: keep only the predicted ids, so that evaluation gathers one id per position
    across processes rather than the logits and the encoder states a seq2seq head also returns."""
    if isinstance(logits, tuple):
        logits = logits[0]
    return logits.argmax(-1)


def train_and_evaluate(
    trainer: Trainer, training_args: TrainingArguments, extra: dict | None = None, arguments: tuple = ()
) -> dict:
    """Train (resuming where asked), save the model and tokenizer to --output_dir, evaluate. Returns the metrics,
    which are also written to train_results.json / eval_results.json / all_results.json in --output_dir. The run's
    `arguments` (its model, data and task dataclasses) and training arguments go to arguments.json beside the model,
    which the model card reads (transformers' training_args.bin is a pickle: nothing of this project reads it)."""
    _set_up_done(training_args)
    try:
        return _train_and_evaluate(trainer, training_args, extra, arguments)
    finally:
        _release_output_dir(training_args)


def _train_and_evaluate(trainer: Trainer, training_args: TrainingArguments, extra: dict | None, arguments: tuple):
    results = dict(extra or {})
    loss_is_a_batch_mean(trainer)
    trainer.add_callback(WarmupWithinRun())
    trainer.add_callback(UpdatesLeftToTrain())
    if arguments:
        trainer.add_callback(RecordInputsInCheckpoints(arguments))
    if training_args.do_train:
        # a stop signal is acted on while there is training to lose: after the last update it lets the saves finish
        with StopSignals() as signals:
            outcome = _train_or_stop(trainer, training_args, signals)
            _save_trained_model(trainer, training_args, arguments)
        metrics = {**outcome.metrics, "num_processes": training_args.world_size}
        trainer.log_metrics("train", metrics)
        trainer.save_metrics("train", metrics)
        results.update({f"train_{k}" if not k.startswith("train") else k: v for k, v in metrics.items()})
    if training_args.do_eval:
        metrics = trainer.evaluate()
        trainer.log_metrics("eval", metrics)
        trainer.save_metrics("eval", metrics)
        results.update(metrics)
    end_process_group()
    return results


__all__ = [
    "KeepGenerationConfig",
    "argmax_logits",
    "check_run",
    "end_process_group",
    "loss_is_a_batch_mean",
    "resume_checkpoint",
    "setup_logging",
    "start_run",
    "train_and_evaluate",
]
