"""Training a Vaswani model from scratch with Hugging Face Accelerate: the same code runs in one process on a CPU,
on several GPUs (`accelerate launch`, DDP), on several machines, in mixed precision, and under FSDP or DeepSpeed
when an Accelerate config file asks for them.

The loop (`train`): the run set up on its engine (`engine`, resumed by `resuming`), then updates (`update`) until
the run's end, logging, evaluating, keeping the best model and saving checkpoints on the way, and stopping after an
update when a stop signal came (`preemption`); at the end, `best/` and `last/` published and the summary written.
"""

import json
import signal
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from accelerate import Accelerator
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ..output_paths import write_text_atomically
from ..runs.errors import CheckpointError, MetricsWriteError
from ..runs.ownership import die_with_the_launcher, release_output_dir
from ..runs.preemption import RESUMABLE, STOP_SIGNALS, StoppedBySignal, StopSignals
from ..runs.records import ARGUMENTS_FILE
from .arguments import TrainDataArguments, TrainModelArguments, TrainArguments
from .batching import CollatingDataset, StreamBatch
from .checkpoints import (
    DATA_FILE,
    PROGRESS_FILE,
    all_processes_succeeded,
    checkpoint_path,
    latest_checkpoint,
    list_checkpoints,
    publish_model,
    save_checkpoint,
)
from .engine import installed, set_up
from .preparation import generation_settings
from .reporting import format_summary, plot_training_curves
from .state import Run
from .update import all_finite, diverged, run_update
from .validation import evaluate


@dataclass
class TrainingOutcome:
    summary: dict
    model: torch.nn.Module  # this process's copy, unwrapped
    accelerator: Accelerator


SET_UP_STOP = ("while the run was being set up, before its first update: nothing was trained, so nothing is lost; "
               "the same command with --resume starts it again")


@dataclass
class LoggingWindow:
    """Sums over the updates since the last log line."""

    loss: float = 0.0
    tokens: int = 0
    seconds: float = 0.0
    updates: int = 0

    def add(self, loss: float, tokens: int, seconds: float) -> None:
        self.loss, self.tokens = self.loss + loss, self.tokens + tokens
        self.seconds, self.updates = self.seconds + seconds, self.updates + 1

    @property
    def tokens_per_second(self) -> float:
        return self.tokens / max(self.seconds, 1e-9)


def train(data: TrainDataArguments, model_args: TrainModelArguments, args: TrainArguments) -> TrainingOutcome:
    """Train until the run's end, and publish `best/` and `last/`. A stop signal (SIGTERM, SIGUSR1: see
    `preemption`) during training ends it after the update under way, with a checkpoint: StoppedBySignal."""
    started = time.perf_counter()
    die_with_the_launcher()
    # before the first update nothing is lost by stopping: a stop signal ends the set-up at once, with exit status 75,
    # so that a job requeued on that status starts the run again (a signal's own status, 143, would drop the job)
    with StopSignals(at_once=SET_UP_STOP):
        run = set_up(data, model_args, args)
    try:
        run.started, run.earlier_seconds = started, run.progress.wall_seconds
        # from the first update on, a stop signal is noted and acted on between updates; after the last update it
        # lets the run finish (its evaluation and saves), and ends it normally
        with StopSignals() as stop:
            bar = tqdm(total=args.max_steps, initial=run.progress.step, desc="training",
                       disable=not run.accelerator.is_main_process)
            try:
                stopped_because, last_evaluated, last_saved = _train_until_done(run, bar, stop)
            finally:
                bar.close()  # also when an error stops the run, so that its message does not end up on the bar's line
            if last_evaluated != run.progress.step:
                _evaluate_and_keep_best(run)
            if last_saved != run.progress.step:
                _save_full_checkpoint(run)
            publish_model(run.accelerator, run.model, run.tokenizer, run.output_dir / "last")
            summary = _finish(run, stopped_because)
    except StoppedBySignal:
        # the caller gets no accelerator back: the trackers are flushed and the process group ended here, after a
        # barrier (see vaswani.finetuning.run.end_process_group for why)
        run.accelerator.wait_for_everyone()
        run.accelerator.end_training()
        raise
    finally:
        if run.lock is not None:
            release_output_dir(run.lock)
    return TrainingOutcome(summary=summary, model=run.accelerator.unwrap_model(run.model), accelerator=run.accelerator)


def _train_until_done(run: Run, bar, stop: StopSignals | None = None) -> tuple[str, int | None, int | None]:
    """Updates until max_steps, max_epochs or early stopping; logs, evaluates and saves on the way. Returns why it
    stopped, and the last update evaluated and saved. When any process received a stop signal (`stop`), every
    process stops after the same update, saves a checkpoint of it and raises StoppedBySignal."""
    args, progress, accelerator = run.args, run.progress, run.accelerator
    batches = training_batches(run)
    window = LoggingWindow()
    last_saved = None
    # resumed from the checkpoint of an update that was evaluated before it was saved: that evaluation is done
    last_evaluated = progress.step if progress.last_evaluated == progress.step else None
    run.model.train()
    while progress.step < args.max_steps:
        if args.max_epochs is not None and progress.epoch >= args.max_epochs:
            return f"reached max_epochs={args.max_epochs}", last_evaluated, last_saved
        update_started = time.perf_counter()
        micro_batches = [next(batches) for _ in range(run.accumulation)]
        progress.epoch, progress.position = micro_batches[-1].following

        loss, tokens, grad_norm = run_update(
            accelerator, run.updating_model, run.optimizer, run.schedule,
            [batch.tensors for batch in micro_batches], args, progress, stop,
            token_counts=[batch.tokens for batch in micro_batches],
        )
        seconds = time.perf_counter() - update_started
        progress.step, progress.tokens = progress.step + 1, progress.tokens + tokens
        progress.train_seconds += seconds
        window.add(loss, tokens, seconds)
        learning_rate = run.schedule.get_last_lr()[0]
        bar.update(1)
        bar.set_postfix(loss=f"{loss:.3f}", lr=f"{learning_rate:.2e}", tok_s=f"{window.tokens_per_second:,.0f}",
                        refresh=False)

        if progress.step % args.logging_steps == 0 or progress.step == 1:
            record = {
                "step": progress.step,
                "epoch": progress.epoch,
                "loss": window.loss / window.updates,
                "learning_rate": learning_rate,
                "tokens_per_second": window.tokens_per_second,
                "tokens": progress.tokens,
                **({"grad_norm": grad_norm} if grad_norm is not None else {}),
            }
            _log_metrics(run, record)
            accelerator.log(record, step=progress.step)
            window = LoggingWindow()

        if progress.step % args.eval_steps == 0:
            _evaluate_and_keep_best(run)
            last_evaluated = progress.step
        if progress.step % args.save_steps == 0:
            _save_full_checkpoint(run)
            last_saved = progress.step
        patience = args.early_stopping_patience
        if patience is not None and progress.evaluations_without_improvement >= patience:
            return f"no better {run.score_name} in {patience} evaluations (early stopping)", last_evaluated, last_saved
        if stop is not None and stop.agreed:
            _stop_with_a_checkpoint(run, stop, saved=last_saved == progress.step)
    return f"reached max_steps={args.max_steps}", last_evaluated, last_saved


def training_batches(run: Run) -> Iterator[StreamBatch]:
    """This process's training batches, collated, from where the run is on: the batches of the stream
    (TokenBudgetBatches.stream) in its order, read and padded by --dataloader_num_workers worker processes ahead of
    the updates (and put in pinned memory on a GPU, from where they go to it without blocking). The workers only
    collate: the stream, BPE-dropout's segmentation and the positions in the data are the main process's, so the
    batches are those the run makes without workers, tensor for tensor."""
    progress, device = run.progress, run.accelerator.device
    workers = run.args.dataloader_num_workers
    if workers is None:
        workers = 2 if device.type == "cuda" else 0
    dataset = CollatingDataset(run.prepared.train.select_columns(["input_ids", "labels"]),
                               run.tokenizer.pad_token_id, run.batches.shapes)
    loader = DataLoader(
        dataset, batch_size=None, sampler=_batch_keys(run, progress.epoch, progress.position), num_workers=workers,
        pin_memory=device.type == "cuda", worker_init_fn=_ignore_stop_signals,
        generator=torch.Generator(),  # the workers' seeds, drawn from this one rather than from the run's random state
    )
    return iter(loader)


def _batch_keys(run: Run, epoch: int, position: int) -> Iterator[tuple]:
    """The stream's batches from (`epoch`, `position`) on, as CollatingDataset's keys: each with the place of the
    batch after it (read while the stream is in its epoch) and its pairs (under BPE-dropout, segmented here)."""
    for epoch, position, indices in run.batches.stream(epoch, position):
        following = run.batches.next_position(epoch, position)
        yield epoch, position, following, run.resegmented.rows(epoch, indices) if run.resegmented else indices


def _ignore_stop_signals(worker_id: int) -> None:
    """A DataLoader worker leaves the stop signals to the training process, which finishes its update and saves
    (`preemption`): a job's SIGTERM reaches every process of its group, and a worker that died of it would stop
    the training process with an error first."""
    for number in STOP_SIGNALS:
        signal.signal(number, signal.SIG_IGN)


def _stop_with_a_checkpoint(run: Run, stop: StopSignals, saved: bool) -> None:
    """End the run on a stop signal, after the checkpoint of its last update (unless it was just saved)."""
    if not saved:
        _save_full_checkpoint(run)
    folder = checkpoint_path(run.output_dir / "checkpoints", run.progress.step)
    raise StoppedBySignal(
        f"stopped by {stop.describe()} after update {run.progress.step}: its checkpoint {folder} holds the run so "
        f"far; the same command with --resume continues it exactly ({RESUMABLE})."
    )


def _log_metrics(run: Run, record: dict) -> None:
    """Append `record` to metrics.jsonl (the main process writes it). A write that fails (a full disk) leaves the
    file as it was and stops every process here together, after a checkpoint of this update if one can still be
    written; the message says what was kept."""
    failure = None
    try:
        run.metrics.write(record)
    except MetricsWriteError as error:
        failure = error
    if all_processes_succeeded(run.accelerator, failure is None):
        return
    failure = failure or f"The main process could not write to {run.metrics.path}."
    try:
        _save_full_checkpoint(run)
        kept = f"Saved the checkpoint of update {run.progress.step} all the same"
    except CheckpointError:
        latest = latest_checkpoint(run.output_dir / "checkpoints")
        kept = (f"A checkpoint of update {run.progress.step} could not be written either (its temporary folder is "
                f"removed); {f'the latest one is {latest}' if latest else 'none was saved before'}")
    raise MetricsWriteError(f"{failure} {kept}. Free disk space, then continue with --resume.")


def _evaluate_and_keep_best(run: Run) -> dict:
    """Evaluate, log, and publish the model as `best/` when it scores better than every earlier evaluation."""
    progress, accelerator = run.progress, run.accelerator
    results = evaluate(
        accelerator, run.model, run.tokenizer, run.prepared.validation, run.data.task, run.args.max_tokens_per_batch,
        run.model_args.label_smoothing, run.data.max_eval_samples, run.args.eval_batch_size,
        **generation_settings(run.args),
    )
    run.model.train()
    value = results["val_loss"] if run.score_name == "loss" else results[run.score_name]
    improved = progress.best_score is None or (
        value < progress.best_score if run.score_name == "loss" else value > progress.best_score
    )
    if improved:
        progress.best_score, progress.best_step = value, progress.step
        progress.evaluations_without_improvement = 0
        publish_model(accelerator, run.model, run.tokenizer, run.output_dir / "best")
    else:
        progress.evaluations_without_improvement += 1
    record = {"step": progress.step, **{k: v for k, v in results.items() if k not in ("samples", "warning")}}
    _log_metrics(run, record)
    progress.last_evaluated = progress.step  # (after its line is written: a checkpoint says so from here on)
    accelerator.log({k: v for k, v in record.items() if isinstance(v, (int, float))}, step=progress.step)
    if accelerator.is_main_process:
        source, output, reference = results["samples"][0]
        numbers = ", ".join(f"{k} {v:.4g}" for k, v in record.items() if isinstance(v, float))
        if "distinct_outputs" in record:
            numbers += f", distinct outputs {record['distinct_outputs']} of {record['distinct_inputs']} inputs"
        tqdm.write(f"update {progress.step}: {numbers}{' (new best)' if improved else ''}\n"
                   f"  e.g. {source!r}\n    -> {output!r}\n    reference {reference!r}")
        if "warning" in results:
            tqdm.write(f"WARNING at update {progress.step}: {results['warning']}")
    return results


def _save_full_checkpoint(run: Run) -> None:
    """The run's full state at its current update, with the wall time so far (for the summary after a resume)."""
    if not all_finite(run.accelerator, [*run.model.parameters(), *_optimizer_tensors(run.optimizer.optimizer)]):
        raise diverged("the weights or the optimizer state hold inf or nan", run.progress, run.args, run.accelerator,
                       applied=True, update=run.progress.step)
    run.progress.wall_seconds = run.wall_seconds()
    run.progress.first_batch = run.batches.first_batch(run.progress.epoch)
    records = {
        PROGRESS_FILE: {"num_processes": run.accelerator.num_processes, "progress": run.progress.state_dict()},
        ARGUMENTS_FILE: run.options,
        DATA_FILE: run.fingerprints,
    }
    save_checkpoint(run.accelerator, run.model, run.tokenizer, run.output_dir / "checkpoints", run.progress.step,
                    run.args.keep_checkpoints, records=records)


def _optimizer_tensors(optimizer):
    return [value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)]


def _peak_memory_mib(device: torch.device) -> float | None:
    """The most GPU memory this process's tensors held at once (the CUDA allocator's high-water mark), in MiB; None
    off a GPU, where PyTorch keeps no such mark."""
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else None


def _finish(run: Run, stopped_because: str) -> dict:
    accelerator, progress, output_dir = run.accelerator, run.progress, run.output_dir
    summary = {
        "stopped_because": stopped_because,
        "steps": progress.step,
        "wall_seconds": run.wall_seconds(),  # the whole run, resumed parts included
        "train_seconds": progress.train_seconds,
        "tokens": progress.tokens,
        "tokens_per_second": progress.tokens / max(progress.train_seconds, 1e-9),
        "num_processes": accelerator.num_processes,
        "mixed_precision": accelerator.mixed_precision,
        "distributed_type": accelerator.distributed_type.value,  # what Accelerate set up: NO, MULTI_GPU, FSDP, ...
        "peak_memory_mib": _peak_memory_mib(accelerator.device),
        "best_metric": run.score_name,
        "best_score": progress.best_score,
        "best_step": progress.best_step,
        "best_model": str(output_dir / "best"),
        "last_model": str(output_dir / "last"),
        "checkpoints": [str(path) for _, path in list_checkpoints(output_dir / "checkpoints")],
        "metrics_file": str(run.metrics.path),
        "curves_file": str(output_dir / "training_curves.png"),
    }
    if accelerator.is_main_process:
        if installed("matplotlib"):
            plot_training_curves(run.metrics.read(), "val_loss" if run.score_name == "loss" else run.score_name,
                                 Path(summary["curves_file"]))
        else:  # a picture is not worth failing a finished run for
            summary["curves_file"] = None
            accelerator.print("No training_curves.png: matplotlib is not installed (pip install "
                              "'vaswani-transformer[plot]'); metrics.jsonl holds the same numbers.")
        write_text_atomically(output_dir / "summary.json", json.dumps(summary, indent=2))
        accelerator.print(format_summary(summary))
    for tracker in accelerator.trackers:
        tracker.finish()  # flushed and closed; the process group stays for the caller (see scripts/train.py)
    return summary


__all__ = ["train", "training_batches"]
