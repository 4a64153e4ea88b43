"""Resuming a run (--resume) from the newest checkpoint it can continue from exactly, after the checks that make a
resumed run the one it continues: no option the checkpoint fixes changed, the same data and tokenizer, a place in the
data the run can reach, the same number of processes under an engine that shards the model; a checkpoint of another
number of processes continues after the same batches."""

from pathlib import Path

import numpy as np
from accelerate.utils import DistributedType, set_seed

from ..runs.errors import CheckpointError, TrainingError
from ..runs.records import ARGUMENTS_FILE
from ..safe_loading import describe_load_error, read_json_record
from .arguments import CHANGEABLE_ON_RESUME, options_changed_on_resume
from .batching import TokenBudgetBatches, share_length, update_split
from .checkpoints import DATA_FILE, PROGRESS_FILE, resumable_checkpoint
from .seq2seq_data import changed_inputs
from .state import Run, TrainingProgress


def resume(run: Run, peak_learning_rate: float) -> None:
    """Load the newest checkpoint the run can continue from exactly (saying why a newer one cannot), after checking
    that no option the checkpoint fixes was changed, that the data and the tokenizer are those it was trained with,
    and that its place in the data is one the run can reach; then apply the schedule options that may change. A
    checkpoint of another number of processes continues after the same batches (`_continue_elsewhere`)."""
    accelerator, root, progress = run.accelerator, run.output_dir / "checkpoints", run.progress
    folder, skipped = resumable_checkpoint(root, TrainingProgress.problem)
    if folder is None and not skipped:
        accelerator.print(f"--resume: no checkpoint in {root} yet; starting from the beginning.")
        return
    if folder is None:
        raise CheckpointError(
            "--resume: no checkpoint can be continued from exactly:\n  " + "\n  ".join(skipped) + "\nStart over "
            "with --overwrite_output_dir, or in another --output_dir. Nothing was loaded from them."
        )
    for reason in skipped:
        accelerator.print(f"WARNING: --resume does not use {reason}.")
    if skipped:
        accelerator.print(f"WARNING: resuming from the newest checkpoint that is complete: {folder}.")
    changed = options_changed_on_resume(read_json_record(folder / ARGUMENTS_FILE), run.options)
    if changed:
        raise TrainingError(
            f"--resume from {folder}: these options differ from the run's, and its checkpoint fixes them: "
            f"{'; '.join(changed)}. Give the run's values (its arguments.json), or start a new run in another "
            f"--output_dir. Options that may change on resume: {', '.join(CHANGEABLE_ON_RESUME)}."
        )
    record = read_json_record(folder / PROGRESS_FILE)  # checked by resumable_checkpoint
    progress.load_state_dict(record["progress"])
    if progress.step > run.args.max_steps:
        raise TrainingError(
            f"--resume: the run is at update {progress.step} ({folder}), beyond --max_steps {run.args.max_steps}: "
            "there is nothing to train, and republishing last/ and best/ would record a run that stopped at "
            f"{run.args.max_steps} updates. Give --max_steps {progress.step} or more. Nothing was loaded."
        )
    written_by = record["num_processes"]
    _check_same_inputs(accelerator, folder, run.fingerprints, progress)
    args = run.args
    if args.exact_tokens_per_update and written_by != accelerator.num_processes:
        theirs, ours = (update_split(args.tokens_per_update, args.max_tokens_per_batch, processes, True)
                        for processes in (written_by, accelerator.num_processes))
        if theirs.micro_batch_tokens != ours.micro_batch_tokens:
            raise CheckpointError(
                f"--resume: {folder} was written by {written_by} process(es) and this run has "
                f"{accelerator.num_processes}: --exact_tokens_per_update cuts micro-batches of "
                f"{theirs.micro_batch_tokens} tokens on {written_by} and of {ours.micro_batch_tokens} on "
                f"{accelerator.num_processes}, other batches than those its place in the data counts; allowed: "
                f"resume on {written_by} process(es). Nothing was loaded."
            )
    most_micro_batches = update_split(args.tokens_per_update, args.max_tokens_per_batch, 1,
                                      args.exact_tokens_per_update).accumulation
    problem = position_problem(progress, written_by, run.batches, most_micro_batches)
    if problem is not None:
        raise CheckpointError(
            f"--resume: {folder / PROGRESS_FILE}: {problem}. Remove that folder to resume from the one before it, "
            "or start over with --overwrite_output_dir. Nothing was loaded from it."
        )
    if written_by != accelerator.num_processes and accelerator.distributed_type in SHARDED_ENGINES:
        raise CheckpointError(
            f"--resume: {folder} was written by {written_by} process(es) and this run has "
            f"{accelerator.num_processes}: under {accelerator.distributed_type.value} each process holds its own "
            f"shard of the model and the optimizer, so it resumes on {written_by} processes only."
        )
    try:
        accelerator.load_state(str(folder))  # safetensors, and torch.load(weights_only=True) for the rest
    except Exception as error:  # UnpicklingError (a pickle that is not plain data), RuntimeError (shapes), OSError
        raise CheckpointError(
            f"--resume: {folder} cannot be loaded ({describe_load_error(error)}). Remove that folder to resume from "
            "the one before it, or start over with --overwrite_output_dir."
        ) from None
    # Accelerate's count of micro-batches, which decides the updates' boundaries: what this run would have counted
    # (the value loaded, but for a checkpoint of another number of processes, which made updates of other sizes)
    accelerator.step = progress.step * run.accumulation
    if written_by != accelerator.num_processes:
        _continue_elsewhere(run, written_by)
        accelerator.print(f"WARNING: {_what_differs(run, folder, written_by)}")
    run.batches.continue_epoch(progress.epoch, progress.first_batch)
    _set_peak_learning_rate(run.schedule, peak_learning_rate)
    accelerator.print(f"Resumed from {folder}: update {progress.step}, epoch {progress.epoch}, "
                      f"batch {progress.position}.")


# engines that shard the model and optimizer states among the processes (a checkpoint holds one shard per process)
SHARDED_ENGINES = (DistributedType.FSDP, DistributedType.DEEPSPEED, DistributedType.MEGATRON_LM)


def _check_same_inputs(accelerator, folder: Path, fingerprints: dict, progress: TrainingProgress) -> None:
    """Refuse to resume on data or a tokenizer other than those the checkpoint was trained with: it would go on at
    its batch of other pairs (or read them with another vocabulary) without a word. A checkpoint of an earlier
    version, without the record, is resumed with a warning."""
    if not (folder / DATA_FILE).is_file():
        accelerator.print(f"WARNING: {folder} records no fingerprints of its data and tokenizer (it was written "
                          "by an earlier version): the data could not be checked to be the same.")
        return
    changed = changed_inputs(read_json_record(folder / DATA_FILE), fingerprints)
    if changed:
        raise TrainingError(
            f"--resume from {folder}: the data or the tokenizer differ from those the checkpoint was trained with "
            f"(what was -> what is): {'; '.join(changed)}. The run would go on at epoch {progress.epoch}, batch "
            f"{progress.position} of other pairs. Give the run the files it was trained with, or start a new run in "
            "another --output_dir (or with --overwrite_output_dir). Nothing was loaded."
        )


def position_problem(progress: TrainingProgress, written_by: int, batches: TokenBudgetBatches,
                     most_micro_batches: int) -> str | None:
    """Whether a checkpoint's place in the data is one its run could reach on this data, in words: the epoch no
    later than its updates can get to (each takes at most `most_micro_batches` batches per process, and an epoch
    holds at least one; a resume on another number of processes may find the rest of its epoch too short to share
    and start the next), the batch within that epoch's list and within the share of each of its processes."""
    most_epoch = progress.step * (most_micro_batches + 1)
    if progress.epoch > most_epoch:
        return (f"`epoch` is {progress.epoch}; allowed: at most {most_epoch}, as far as {progress.step} updates can "
                f"go (each takes at most {most_micro_batches} batch(es) per process, and may begin a new epoch)")
    total = len(batches.all_batches(progress.epoch))
    if progress.first_batch > total:
        return (f"`first_batch` is {progress.first_batch}; allowed: at most {total}, the number of batches of "
                f"epoch {progress.epoch}")
    most_position = share_length(total, written_by, progress.first_batch)
    if progress.position > most_position:
        return (f"`position` is {progress.position}; allowed: at most {most_position}, the batches each of its "
                f"{written_by} process(es) takes of epoch {progress.epoch} (from its batch {progress.first_batch})")
    return None


def _continue_elsewhere(run: Run, written_by: int) -> None:
    """Continue the checkpoint of `written_by` processes, just loaded, on this run's processes: after the same
    batches, from the batch of the same epoch that the first of them had not taken. The batches of an epoch are one
    list, whatever the number of processes (`TokenBudgetBatches`), so this is the point after the same pairs, hence
    after the same number of pairs and tokens too; neither number alone would say where in the shuffled list to go
    on. Each process the checkpoint holds a random state for has restored it (Accelerate's load_state); each other
    process is seeded anew, from --seed, the update and its index."""
    progress, accelerator = run.progress, run.accelerator
    progress.first_batch, progress.position = progress.first_batch + progress.position * written_by, 0
    if accelerator.process_index >= written_by:
        seed = np.random.SeedSequence([run.args.seed, progress.step, accelerator.process_index]).generate_state(1)[0]
        set_seed(int(seed))


def _what_differs(run: Run, folder: Path, written_by: int) -> str:
    """In one line, how a run continued on another number of processes (`_continue_elsewhere`) differs from one
    continued on as many as wrote the checkpoint."""
    progress, processes = run.progress, run.accelerator.num_processes
    epoch_batches = run.batches.all_batches(progress.epoch)
    pairs = sum(len(batch) for batch in epoch_batches[: progress.first_batch])
    states = f"random states: {_named_processes(0, min(processes, written_by))} restored"
    if processes < written_by:
        states += f", those of {_named_processes(processes, written_by)} not used"
    else:
        states += f", {_named_processes(written_by, processes)} seeded anew (from --seed and the update)"
    return (
        f"{folder} was written by {written_by} process(es) and this run has {processes}: it goes on after the same "
        f"pairs, from batch {progress.first_batch} of the {len(epoch_batches)} of epoch {progress.epoch} (the "
        f"{pairs} pairs before it were trained on). The batches are dealt out among {processes} process(es) x "
        f"{run.accumulation} micro-batch(es) per update, so the updates from here group the pairs otherwise than on "
        f"{written_by} (and the end of each epoch leaves out at most {processes - 1} batch(es), not {written_by - 1}); "
        f"{states}."
    )


def _named_processes(first: int, stop: int) -> str:
    return f"process {first}" if stop - first == 1 else f"processes {first}-{stop - 1}"


def _set_peak_learning_rate(schedule, peak_learning_rate: float) -> None:
    """Make the schedule follow this run's options after a resume: the checkpoint restores the peak it was saved
    with (LambdaLR's base_lrs), while warmup, cooldown and max_steps come from the schedule's function, built from
    the options given now. Without changed options this sets what was loaded."""
    scheduler = getattr(schedule, "scheduler", schedule)  # Accelerate's wrapper holds the LambdaLR
    scheduler.base_lrs = [peak_learning_rate for _ in scheduler.base_lrs]
    rates = [peak_learning_rate * factor(scheduler.last_epoch) for factor in scheduler.lr_lambdas]
    for group, rate in zip(scheduler.optimizer.param_groups, rates):
        group["initial_lr"], group["lr"] = peak_learning_rate, rate
    scheduler._last_lr = rates


__all__ = ["SHARDED_ENGINES", "position_problem", "resume"]
