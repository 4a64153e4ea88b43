"""Training a Vaswani model from scratch with Hugging Face Accelerate: the same code runs in one process on a CPU,
on several GPUs (`accelerate launch`, DDP), on several machines, in mixed precision, and under FSDP or DeepSpeed
when an Accelerate config file asks for them.

One update: each process takes `accumulation` micro-batches of its own share of the data, the loss of each is
weighted by its number of target tokens (so that the update's gradient is the mean over every target token of all
processes, as with one big batch), gradients are clipped, and Adam steps with the inverse-square-root schedule.
"""

import importlib.util
import json
import math
import os
import shutil
import signal
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, parse_flag_from_env, set_seed
from torch.distributed.tensor import DTensor
from torch.utils.data import DataLoader
from tqdm.auto import tqdm

from ..output_paths import write_text_atomically
from ..runs.errors import CheckpointError, MetricsWriteError, TrainingDiverged, TrainingError
from ..runs.ownership import die_with_the_launcher, release_output_dir
from ..runs.preemption import RESUMABLE, STOP_SIGNALS, StoppedBySignal, StopSignals
from ..runs.records import ARGUMENTS_FILE
from ..safe_loading import describe_load_error, read_json_record
from .arguments import (
    CHANGEABLE_ON_RESUME,
    TrainDataArguments,
    TrainModelArguments,
    TrainArguments,
    arguments_as_dict,
    best_metric_name,
    options_changed_on_resume,
)
from .batching import BatchShapes, CollatingDataset, StreamBatch, TokenBudgetBatches, share_length
from .checkpoints import (
    DATA_FILE,
    PROGRESS_FILE,
    all_processes_succeeded,
    checkpoint_path,
    describe_value,
    is_count,
    latest_checkpoint,
    list_checkpoints,
    publish_model,
    resumable_checkpoint,
    save_checkpoint,
)
from .chunked_loss import ChunkedLossUpdates, autocast_dtype, refusal as chunked_loss_refusal
from .cuda_graphs import GraphedUpdates, UpdateGraphs, refusal as cuda_graphs_refusal
from .validation import evaluate
from .optimization import build_optimizer_and_schedule, paper_peak_learning_rate
from .preparation import (
    build_model,
    check_lengths_before_work,
    generation_settings,
    obtain_tokenizer,
    prepare_output_dir,
    run_inputs,
)
from .reporting import MetricsLog, format_summary, plot_training_curves
from .seq2seq_data import (
    BpeDropoutEpochs,
    PreparedData,
    changed_inputs,
    input_fingerprints,
    load_raw_splits,
    prepare_data,
)


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
        The bounds that the data set (epoch, batch) are `_position_problem`'s."""
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
        if (best_score is None) != (best_step is None):
            return (f"`best_score` is {describe_value(best_score)} and `best_step` {describe_value(best_step)}; "
                    "allowed: both null (before any evaluation) or both set")
        return None


@dataclass
class TrainingOutcome:
    summary: dict
    model: torch.nn.Module  # this process's copy, unwrapped
    accelerator: Accelerator


@dataclass
class Run:
    """Everything a training run works with, built once by `_set_up`."""

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


class TrainingHooks:
    """Where a test reaches into a run: the loop asks `extra_save` after each update whether to save a checkpoint
    there besides those of --save_steps, and calls `checkpoint_written` inside each save, with the temporary folder,
    once its files are written and before they are published. These do nothing; the kill -9 tests (tests/training)
    set `hooks` to a subclass that dies halfway through a save."""

    def extra_save(self, step: int) -> bool:
        return False

    def checkpoint_written(self, folder: Path) -> None:
        pass


hooks = TrainingHooks()  # the loop looks it up at each call, so a test may replace it before `train`


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
        run = _set_up(data, model_args, args)
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


def _set_up(data: TrainDataArguments, model_args: TrainModelArguments, args: TrainArguments) -> Run:
    """Data, tokenizer, model, optimizer and schedule, prepared by Accelerate; the state of the latest checkpoint
    with --resume."""
    output_dir = Path(args.output_dir)
    if args.cpu_threads is not None:
        torch.set_num_threads(args.cpu_threads)
    if args.report_to == "auto":
        args.report_to = "tensorboard" if installed("tensorboard") else "none"
    elif args.report_to == "tensorboard" and not installed("tensorboard"):
        raise TrainingError("--report_to tensorboard: tensorboard is not installed (pip install "
                            "'vaswani-transformer[tensorboard]'); or pass --report_to none.")
    check_mixed_precision_value(args.mixed_precision)
    check_lengths_before_work(data, model_args, args)
    accelerator = Accelerator(
        mixed_precision=default_mixed_precision(args.mixed_precision),
        log_with=None if args.report_to == "none" else args.report_to,
        project_dir=str(output_dir),
        step_scheduler_with_optimizer=False,  # the schedule counts updates, however many processes there are
    )
    check_mixed_precision_applies(accelerator, args.mixed_precision)
    check_engine(accelerator)
    if args.cuda_graphs:
        micro_batches = _micro_batches_per_update(args, accelerator.num_processes)
        if (problem := cuda_graphs_refusal(accelerator, args.torch_compile, micro_batches)) is not None:
            raise TrainingError(problem)
    if args.chunked_loss and (problem := chunked_loss_refusal(accelerator)) is not None:
        raise TrainingError(problem)
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched > 1 and accelerator.num_processes != launched:
        # without a GPU, Accelerate forms a process group only when told to run on the CPU; the processes would
        # otherwise each train alone on the same folder
        raise TrainingError(
            f"Launched as {launched} processes (WORLD_SIZE={launched}), but they would each train alone (Accelerate "
            f"sees {accelerator.num_processes}): on a machine without GPUs set ACCELERATE_USE_CPU=1 "
            "(`ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N ...`) to train on CPU processes "
            "together."
        )
    lock = prepare_output_dir(accelerator, output_dir, args, run_inputs(data, model_args))
    try:
        return _prepare_run(accelerator, lock, data, model_args, args)
    except BaseException:
        if lock is not None:
            release_output_dir(lock)
        raise


def default_mixed_precision(option: str | None, environment=os.environ, gpu_computes_bf16=None) -> str | None:
    """The mixed precision of a run: --mixed_precision as given; unset, what `accelerate launch` says (it passes
    its config's or its options' choice as ACCELERATE_MIXED_PRECISION, which Accelerate reads); run without it,
    bf16 where the run trains on a GPU that computes in bf16 (`gpu_computes_bf16()`, by default
    `_cuda_computes_bf16`), else None: Accelerate's default, fp32."""
    if option is not None or "ACCELERATE_MIXED_PRECISION" in environment:
        return option
    return "bf16" if (gpu_computes_bf16 or _cuda_computes_bf16)() else None


# The mixed precisions Accelerate knows (its PrecisionType); it takes ACCELERATE_MIXED_PRECISION as it finds it.
MIXED_PRECISIONS = ("no", "fp16", "bf16", "fp8")
# What a CPU computes in: PyTorch's CPU autocast runs bf16; fp16 and fp8 leave every operation in fp32 there.
CPU_MIXED_PRECISIONS = ("no", "bf16")


def _mixed_precision_source(option: str | None) -> str:
    return (f"--mixed_precision {option}" if option is not None
            else f"ACCELERATE_MIXED_PRECISION={os.environ.get('ACCELERATE_MIXED_PRECISION')}")


def check_mixed_precision_value(option: str | None, environment=os.environ) -> None:
    """Refuse a mixed precision Accelerate does not know, given by `accelerate launch` (its config, or
    ACCELERATE_MIXED_PRECISION): it would be recorded as given while the run computes in fp32."""
    value = option if option is not None else environment.get("ACCELERATE_MIXED_PRECISION")
    if value is not None and value not in MIXED_PRECISIONS:
        raise TrainingError(f"{_mixed_precision_source(option)}: not a mixed precision; allowed: "
                            f"{', '.join(MIXED_PRECISIONS)}.")


def check_mixed_precision_applies(accelerator, option: str | None) -> None:
    """Refuse a mixed precision that the run's device would not apply (fp16 or fp8 on a CPU): the run would train in
    fp32, bit for bit, while its log and summary.json said fp16."""
    if accelerator.device.type == "cpu" and accelerator.mixed_precision not in CPU_MIXED_PRECISIONS:
        raise TrainingError(
            f"{_mixed_precision_source(option)}: {accelerator.mixed_precision} does not apply on a CPU (PyTorch's "
            "CPU autocast computes in bf16 or not at all), so the run would train in fp32 while recording "
            f"{accelerator.mixed_precision}. Use --mixed_precision no (fp32), or bf16."
        )


def _cuda_computes_bf16() -> bool:
    """Whether Accelerate will put the run on a CUDA GPU with bf16 arithmetic (Ampere and later; older GPUs only
    emulate it, slowly)."""
    if parse_flag_from_env("ACCELERATE_USE_CPU") or not torch.cuda.is_available():
        return False
    return torch.cuda.is_bf16_supported(including_emulation=False)


def installed(package: str) -> bool:
    """Whether an optional package (the `plot` and `tensorboard` extras) is there to be imported."""
    return importlib.util.find_spec(package) is not None


# what `accelerate launch --config_file ...` asks for, through the environment of the processes it starts
REQUESTED_ENGINES = {"ACCELERATE_USE_FSDP": DistributedType.FSDP, "ACCELERATE_USE_DEEPSPEED": DistributedType.DEEPSPEED}


def check_engine(accelerator) -> None:
    """Stop when the Accelerate config asks for FSDP or DeepSpeed and Accelerate set up something else: on a machine
    without GPUs it falls back to plain multi-process training (DDP) without a word, and the run would not be what
    the config says."""
    for variable, engine in REQUESTED_ENGINES.items():
        if parse_flag_from_env(variable) and accelerator.distributed_type != engine:
            raise TrainingError(
                f"The Accelerate config asks for {engine.value} ({variable}=true), but Accelerate set up "
                f"{accelerator.distributed_type.value} on {accelerator.device}: {engine.value} shards the model "
                "across GPUs and needs them. On CPUs train without it: `ACCELERATE_USE_CPU=1 accelerate launch "
                "--multi_gpu --num_processes N scripts/train.py ...`."
            )


def fit_deepspeed_config(accelerator, accumulation: int) -> None:
    """Give DeepSpeed the two numbers it needs that the token-budget loader cannot: a micro-batch size (batches hold
    a number of tokens, not of sentences; DeepSpeed only counts with it) and the accumulation that makes
    --tokens_per_update (which the loss weighting assumes)."""
    plugin = accelerator.state.deepspeed_plugin
    if plugin is None:
        return
    if plugin.is_auto("train_micro_batch_size_per_gpu"):
        plugin.deepspeed_config["train_micro_batch_size_per_gpu"] = 1
    plugin.deepspeed_config["gradient_accumulation_steps"] = accumulation


def _prepare_run(accelerator, lock: int | None, data: TrainDataArguments, model_args: TrainModelArguments,
                args: TrainArguments) -> Run:
    output_dir = Path(args.output_dir)
    set_seed(args.seed)

    with accelerator.local_main_process_first():
        train_raw, validation_raw = load_raw_splits(data, output_dir, args.seed)
    tokenizer = obtain_tokenizer(accelerator, model_args, train_raw, data, output_dir)
    fingerprints = input_fingerprints(accelerator, data, output_dir, train_raw, validation_raw, tokenizer,
                                      model_args.tokenizer)
    model = build_model(model_args, data, args, tokenizer)
    with accelerator.local_main_process_first():
        prepared = prepare_data(train_raw, validation_raw, tokenizer, data)
    for report in prepared.reports:
        accelerator.print(report.describe(data))

    peak_learning_rate = args.learning_rate or paper_peak_learning_rate(model.config.d_model, args.warmup_steps)
    optimizer, schedule = build_optimizer_and_schedule(
        model, peak_learning_rate, args.warmup_steps, (args.adam_beta1, args.adam_beta2), args.adam_epsilon,
        args.weight_decay, max_steps=args.max_steps, cooldown_steps=args.cooldown_steps,
        # (the graphs of --cuda_graphs --torch_compile step the fused Adam, which reads its learning rate from a tensor)
        fused=(accelerator.device.type == "cuda" or _graphs_step(args)) and accelerator.distributed_type in UNSHARDED,
    )
    accumulation = _micro_batches_per_update(args, accelerator.num_processes)
    accelerator.gradient_accumulation_steps = accumulation
    fit_deepspeed_config(accelerator, accumulation)
    shapes = (BatchShapes(args.max_tokens_per_batch, model.config.max_position_embeddings)
              if args.torch_compile or args.cuda_graphs else None)
    model, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
    update_model = ChunkedLossUpdates(model, autocast_dtype(accelerator)) if args.chunked_loss else model
    if args.torch_compile:
        update_model = compiled_for_updates(accelerator, update_model)
    if args.cuda_graphs:
        update_model = UpdateGraphs(update_model) if args.torch_compile else GraphedUpdates(update_model)

    resegmented = BpeDropoutEpochs(prepared.train, tokenizer, data, accelerator) if data.bpe_dropout > 0 else None
    batches = TokenBudgetBatches(
        prepared.train["source_length"], prepared.train["target_length"], args.max_tokens_per_batch, args.seed,
        accelerator.num_processes, accelerator.process_index,
        epoch_lengths=resegmented.lengths if resegmented else None, shapes=shapes,
    )
    metrics = MetricsLog(output_dir / "metrics.jsonl", enabled=accelerator.is_main_process)
    options = arguments_as_dict(data, model_args, args)
    run = Run(
        data=data, model_args=model_args, args=args, accelerator=accelerator, model=model, optimizer=optimizer,
        schedule=schedule, tokenizer=tokenizer, prepared=prepared, batches=batches, accumulation=accumulation,
        progress=TrainingProgress(), metrics=metrics, score_name=best_metric_name(data, args),
        resegmented=resegmented, options=options, lock=lock, fingerprints=fingerprints, update_model=update_model,
    )
    if args.resume:
        _resume(run, peak_learning_rate)
        metrics.drop_after(run.progress.step)
    if accelerator.is_main_process:
        write_text_atomically(output_dir / ARGUMENTS_FILE, json.dumps(options, indent=2))
    if args.report_to != "none":
        accelerator.init_trackers("tensorboard", config={k: v for k, v in options.items() if v is not None})
    update_path = "".join(f"; {what}" for what, used in (
        ("compiled", args.torch_compile), ("CUDA graphs (captured per batch shape)", args.cuda_graphs),
        ("chunked loss", args.chunked_loss)) if used)
    accelerator.print(
        f"Training a model of {accelerator.unwrap_model(model).num_parameters():,} parameters: "
        f"{accelerator.num_processes} process(es) x {accumulation} micro-batch(es) of <= {args.max_tokens_per_batch} "
        f"tokens per update (target {args.tokens_per_update}); peak learning rate {peak_learning_rate:.2e}; "
        f"mixed precision: {accelerator.mixed_precision}{update_path}."
    )
    return run


# what Accelerate sets up without sharding the model: one process, or DDP (every process holds the whole model)
UNSHARDED = (DistributedType.NO, DistributedType.MULTI_GPU, DistributedType.MULTI_CPU)
# torch.compile's backend for --torch_compile: inductor generates fused kernels (Triton on a GPU, C++ on a CPU)
COMPILE_BACKEND = "inductor"


def compiled_for_updates(accelerator, model: torch.nn.Module) -> torch.nn.Module:
    """The model the updates call under --torch_compile: `model` (as Accelerate prepared it) through
    torch.compile with fullgraph=True, so that a graph break is an error rather than a slow step, and dynamic=True,
    so that one graph takes every batch shape: with torch's default (shapes made dynamic as they are seen to change)
    the Multi30k recipe compiled three graphs in its first four updates, the pairs, then the lengths varying, and on
    an H100 each took inductor 40 to 80 s. The batches still come in a few shapes (`BatchShapes`). Evaluation and
    generation use `model`, eager, with the same weights. Under FSDP and DeepSpeed, whose hooks break the graph, the
    updates stay eager (said)."""
    if accelerator.distributed_type not in UNSHARDED:
        accelerator.print(f"WARNING: --torch_compile is not used under {accelerator.distributed_type.value}: its "
                          "hooks around each layer break a fullgraph compilation; the updates run eagerly.")
        return model
    from torch.fx.experimental import _config as shape_config

    compiled = torch.compile(model, fullgraph=True, dynamic=True, backend=COMPILE_BACKEND)
    compiled_forward = compiled.forward

    def forward(*args, **kwargs):
        # without "duck sizing", which gives sizes equal when first seen one symbol (a first batch whose source and
        # target lengths were equal made a second graph for the next one)
        with shape_config.patch(use_duck_shape=False):
            return compiled_forward(*args, **kwargs)

    compiled.forward = forward
    return compiled


def _graphs_step(args: TrainArguments) -> bool:
    """Whether the optimizer's step is replayed from a CUDA graph (--cuda_graphs --torch_compile)."""
    return args.cuda_graphs and args.torch_compile


def _micro_batches_per_update(args: TrainArguments, num_processes: int) -> int:
    """Micro-batches each process takes per update, so that an update holds about --tokens_per_update tokens."""
    return max(1, round(args.tokens_per_update / (args.max_tokens_per_batch * num_processes)))


def _resume(run: Run, peak_learning_rate: float) -> None:
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
    problem = _position_problem(progress, written_by, run.batches, _micro_batches_per_update(run.args, 1))
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


def _position_problem(progress: TrainingProgress, written_by: int, batches: TokenBudgetBatches,
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


def _train_until_done(run: Run, bar, stop: StopSignals | None = None) -> tuple[str, int | None, int | None]:
    """Updates until max_steps, max_epochs or early stopping; logs, evaluates and saves on the way. Returns why it
    stopped, and the last update evaluated and saved. When any process received a stop signal (`stop`), every
    process stops after the same update, saves a checkpoint of it and raises StoppedBySignal."""
    args, progress, accelerator = run.args, run.progress, run.accelerator
    batches = training_batches(run)
    window = LoggingWindow()
    last_evaluated = last_saved = None
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
        if progress.step % args.save_steps == 0 or hooks.extra_save(progress.step):
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


def run_update(accelerator, model, optimizer, schedule, micro_batches, args, progress,
               stop: StopSignals | None = None,
               token_counts: list[tuple[int, int]] | None = None) -> tuple[float, int, float | None]:
    """One optimizer update from this process's micro-batches. Returns the update's mean loss per target token (all
    processes), the source + target tokens it trained on (all processes) and the gradient norm before clipping.

    The host never waits for the device inside the update: the micro-batches go to the device without blocking
    (from pinned memory where the DataLoader pinned them), the token counts that weigh each micro-batch's loss come
    from the host (`token_counts`, each micro-batch's (source, target) tokens before padding; without them, counted
    on the host tensors given), and the loss is summed on the device. Once per update, after the step, one read of
    the device brings back the loss, the gradient norm and whether the new weights are finite together (with
    `stop`, each process's stop-signal flag too: `stop.agreed` then says whether any process received one). A loss
    or gradient that is not finite stops the run there, before anything of this update is saved.

    Under --cuda_graphs --torch_compile (`model` an `UpdateGraphs`), every update after the process's first is
    replayed from CUDA graphs: the micro-batches copied into their shape's buffers, the step, the gradient norm and
    the weights' check in the graphs (vaswani.training.cuda_graphs)."""
    if token_counts is None:
        token_counts = [_host_token_counts(batch) for batch in micro_batches]
    device, processes = accelerator.device, accelerator.num_processes
    local_tokens = [sum(counts) for counts in zip(*token_counts)]  # source, target
    # every process's counts, summed on the device (the weights below divide by them there; read after the step)
    all_tokens = (accelerator.reduce(_device_values(local_tokens, device), reduction="sum") if processes > 1
                  else local_tokens)
    if isinstance(model, UpdateGraphs) and model.graphing:
        # the whole update from CUDA graphs (one process): its loss sum, gradient norm and weights' check with it
        loss_sum, norm, broken = model.update(micro_batches, all_tokens[1], optimizer, schedule, args.max_grad_norm)
        accelerator.step += len(micro_batches)  # Accelerate's count of micro-batches, as `accumulate` keeps it
    else:
        loss_sum, norm = _micro_batch_updates(accelerator, model, optimizer, schedule, micro_batches, args,
                                              token_counts, all_tokens)
        broken = None
        if isinstance(model, UpdateGraphs):
            model.graphing = True  # after one update without graphs
    check = _update_check(accelerator, loss_sum, all_tokens, norm, model.parameters(), stop, broken)
    if not math.isfinite(check.loss):
        raise _diverged(f"the loss is {check.loss}", progress, args, accelerator)
    # fp16 overflows are the gradient scaler's business: it skipped that step and lowered its scale
    if check.grad_norm is not None and not math.isfinite(check.grad_norm) and accelerator.mixed_precision != "fp16":
        raise _diverged(f"the gradient norm is {check.grad_norm}", progress, args, accelerator)
    if not check.weights_finite:
        raise _diverged("the update made weights inf or nan", progress, args, accelerator, applied=True)
    return check.loss, check.tokens, check.grad_norm


def _micro_batch_updates(accelerator, model, optimizer, schedule, micro_batches, args, token_counts, all_tokens):
    """The update's micro-batches through `model`, forward and backward, then the optimizer's step: the sum of their
    losses each times its target tokens, and the gradient norm before clipping (None without clipping)."""
    device, processes = accelerator.device, accelerator.num_processes
    loss_sum = torch.zeros((), device=device)
    norm = None
    for batch, (_, tokens) in zip(micro_batches, token_counts):
        batch = {name: tensor.to(device, non_blocking=True) for name, tensor in batch.items()}
        with accelerator.accumulate(model):
            loss = model(**batch).loss  # mean over this micro-batch's target tokens
            # Weighted so that the summed gradients are the mean over all target tokens of the update: DDP averages
            # over processes and `backward` divides by the accumulation steps, which the weight undoes.
            accelerator.backward(loss * (tokens * processes * accelerator.gradient_accumulation_steps / all_tokens[1]))
            loss_sum += loss.detach().float() * tokens
            if accelerator.sync_gradients:
                if args.max_grad_norm > 0:
                    norm = accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
                optimizer.step()
                schedule.step()
                optimizer.zero_grad(set_to_none=True)
    return loss_sum, norm


def _host_token_counts(batch: dict[str, torch.Tensor]) -> tuple[int, int]:
    """A micro-batch's (source, target) tokens, counted on its host tensors (before they go to the device): the
    attended source positions and the labels that are not -100."""
    if batch["labels"].device.type != "cpu":
        raise ValueError("run_update counts tokens on the host: give it the micro-batches as collated there, or "
                         "their token_counts.")
    return int(batch["attention_mask"].sum()), int((batch["labels"] != -100).sum())


def _device_values(values, device, dtype=None) -> torch.Tensor:
    """A small tensor of host numbers on `device`, copied without making the host wait (torch.tensor(values,
    device=...) waits for the copy)."""
    host = torch.tensor(values, dtype=dtype)
    if device.type == "cuda":
        host = host.pin_memory()
    return host.to(device, non_blocking=True)


@dataclass
class UpdateCheck:
    """What the host learns of an update at its one synchronization."""

    loss: float  # mean loss per target token, all processes
    tokens: int  # source + target tokens, all processes
    grad_norm: float | None  # before clipping; None without clipping (or under DeepSpeed, which clips itself)
    weights_finite: bool  # on every process


def _update_check(accelerator, loss_sum: torch.Tensor, all_tokens, norm, parameters,
                 stop: StopSignals | None, broken: torch.Tensor | None = None) -> UpdateCheck:
    """Sum the update's loss, its new weights' non-finite flag (`broken`, where the update computed it; else
    checked here) and the stop flags over the processes in one reduction, and read them with the token counts and
    the gradient norm in one transfer to the host."""
    device = accelerator.device
    broken = non_finite_flag(parameters, device) if broken is None else broken
    summed = torch.stack([loss_sum.float(), broken, _stop_flag(stop, device)])
    summed = accelerator.reduce(summed, reduction="sum")
    read = [summed.double() if device.type != "mps" else summed]
    if torch.is_tensor(all_tokens):
        read.append(all_tokens.to(read[0].dtype))
    if torch.is_tensor(norm):
        read.append(_plain_tensor(norm).detach().reshape(1).to(read[0].dtype))
    values = torch.cat(read).tolist()  # the one synchronization of the update
    loss_total, broken, stopping = values[:3]
    source_tokens, target_tokens = values[3:5] if torch.is_tensor(all_tokens) else all_tokens
    grad_norm = values[-1] if torch.is_tensor(norm) else (None if norm is None else float(norm))
    if stop is not None:
        stop.agree(stopping > 0)
    return UpdateCheck(loss=loss_total / target_tokens, tokens=int(source_tokens + target_tokens),
                       grad_norm=grad_norm, weights_finite=broken == 0)


def _plain_tensor(tensor: torch.Tensor) -> torch.Tensor:
    """A DTensor (FSDP2's sharded parameters and the norms computed from them) as the whole tensor; others as they
    are."""
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def _stop_flag(stop: StopSignals | None, device) -> torch.Tensor:
    """This process's stop-signal flag as a device scalar, made on the device (a fill, no copy from the host)."""
    return torch.full((), stop.flag() if stop is not None else 0.0, device=device)


def non_finite_flag(tensors, device) -> torch.Tensor:
    """1.0 on `device` if any of this process's `tensors` (its shard, under FSDP) holds inf or nan, else 0.0,
    without a kernel per tensor: the largest magnitude of each tensor by `torch._foreach_norm` (a few fused
    kernels on a GPU for all of them; inf or nan whenever the tensor holds one, and unlike a sum of squares never
    overflowing for finite values), checked at once. A DTensor (FSDP2's parameters and their optimizer state) is
    checked through its local shard, and tensors kept off the accelerator (Adam's `step` count stays on the CPU) are
    checked where they are, their flag then moved to `device`."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    for tensor in tensors:
        local = tensor.to_local() if isinstance(tensor, DTensor) else tensor
        if local.is_floating_point() and local.numel():
            groups.setdefault((local.device, local.dtype), []).append(local.detach())
    flag = torch.zeros((), device=device)
    for group in groups.values():
        largest = torch.stack(torch._foreach_norm(group, math.inf))
        flag = torch.maximum(flag, (~torch.isfinite(largest).all()).float().to(device))
    return flag


def all_finite(accelerator, tensors, stop: StopSignals | None = None) -> bool:
    """Whether every process's `tensors` are finite (its shard, under FSDP): one check, one reduction, one sync.
    With `stop`, the same reduction carries each process's stop-signal flag, and `stop.agreed` says whether any
    process had received one."""
    device = accelerator.device
    totals = accelerator.reduce(torch.stack([non_finite_flag(tensors, device), _stop_flag(stop, device)]),
                                reduction="sum")
    broken_total, stop_total = totals.tolist()
    if stop is not None:
        stop.agree(stop_total > 0)
    return broken_total == 0


def _optimizer_tensors(optimizer):
    return [value for state in optimizer.state.values() for value in state.values() if torch.is_tensor(value)]


def _diverged(what: str, progress: TrainingProgress, args: TrainArguments, accelerator,
             applied: bool = False, update: int | None = None) -> TrainingDiverged:
    """The error for a run that stopped being finite at update `progress.step + 1`. When the loss or the gradient of
    that update is not finite, a checkpoint of the update just before holds the weights that gave it: it is set
    aside (renamed, so that --resume does not pick it) rather than called good. When the update itself made the
    weights non-finite (`applied`), the weights before it gave a finite loss and gradient: their checkpoint is good."""
    update = update or progress.step + 1
    root = Path(args.output_dir) / "checkpoints"
    checkpoints = dict(list_checkpoints(root))
    suspect = None if applied else checkpoints.get(progress.step)
    set_aside = ""
    if suspect is not None:
        quarantine = suspect.with_name(f"diverged-{suspect.name}")
        if accelerator.is_main_process:
            shutil.rmtree(quarantine, ignore_errors=True)
            suspect.rename(quarantine)
        accelerator.wait_for_everyone()
        set_aside = (f" The checkpoint of update {progress.step} holds the weights that gave it, so it was set "
                     f"aside as {quarantine}.")
    latest = latest_checkpoint(root)
    stopped = "Stopped before saving the broken weights" if applied else "Stopped before saving anything of it"
    return TrainingDiverged(
        f"Training diverged at update {update}: {what}. {stopped}; no checkpoint holds non-finite weights.{set_aside} "
        f"The last good checkpoint is {latest or '(none saved yet)'}. Try a lower --learning_rate, more "
        "--warmup_steps, --max_grad_norm 1.0, or bf16 instead of fp16, and continue with --resume (these options "
        "may change on resume)."
    )


def _save_full_checkpoint(run: Run) -> None:
    """The run's full state at its current update, with the wall time so far (for the summary after a resume)."""
    if not all_finite(run.accelerator, [*run.model.parameters(), *_optimizer_tensors(run.optimizer.optimizer)]):
        raise _diverged("the weights or the optimizer state hold inf or nan", run.progress, run.args, run.accelerator,
                       applied=True, update=run.progress.step)
    run.progress.wall_seconds = run.wall_seconds()
    run.progress.first_batch = run.batches.first_batch(run.progress.epoch)
    records = {
        PROGRESS_FILE: {"num_processes": run.accelerator.num_processes, "progress": run.progress.state_dict()},
        ARGUMENTS_FILE: run.options,
        DATA_FILE: run.fingerprints,
    }
    save_checkpoint(run.accelerator, run.model, run.tokenizer, run.output_dir / "checkpoints", run.progress.step,
                    run.args.keep_checkpoints, records=records, before_publishing=hooks.checkpoint_written)


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


__all__ = [
    "COMPILE_BACKEND",
    "TrainingHooks",
    "TrainingProgress",
    "all_finite",
    "check_engine",
    "check_mixed_precision_applies",
    "check_mixed_precision_value",
    "compiled_for_updates",
    "default_mixed_precision",
    "fit_deepspeed_config",
    "hooks",
    "installed",
    "non_finite_flag",
    "run_update",
    "train",
    "training_batches",
]
