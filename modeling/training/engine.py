"""Setting a training run up (`set_up`): the Accelerate engine it trains on, checked against what was asked of it
(a mixed precision the device applies, FSDP or DeepSpeed where the Accelerate config asks for them, the launched
processes forming one group), and the run built on that engine: the data, the tokenizer and the model, the optimizer
and its schedule prepared by Accelerate, the updates compiled (--torch_compile) or replayed from CUDA graphs
(--cuda_graphs), and with --resume the state of the latest checkpoint (`resuming`)."""

import importlib.util
import json
import os
from pathlib import Path

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType, parse_flag_from_env, set_seed

from ..output_paths import write_text_atomically
from ..runs.errors import TrainingError
from ..runs.launch_status import processes_apart
from ..runs.ownership import release_output_dir
from ..runs.records import ARGUMENTS_FILE
from .arguments import TrainDataArguments, TrainModelArguments, TrainArguments, arguments_as_dict, best_metric_name
from .batching import BatchShapes, TokenBudgetBatches, UpdateSplit, update_split
from .chunked_loss import ChunkedLossUpdates, autocast_dtype, refusal as chunked_loss_refusal
from .cuda_graphs import GraphedUpdates, UpdateGraphs, refusal as cuda_graphs_refusal
from .optimization import build_optimizer_and_schedule, paper_peak_learning_rate
from .preparation import (
    build_model,
    check_lengths_before_work,
    obtain_tokenizer,
    prepare_output_dir,
    run_inputs,
)
from .reporting import MetricsLog
from .resuming import resume
from .seq2seq_data import BpeDropoutEpochs, input_fingerprints, load_raw_splits, prepare_data
from .set_up_waits import SetUpWaits
from .state import Run, TrainingProgress


def set_up(data: TrainDataArguments, model_args: TrainModelArguments, args: TrainArguments) -> Run:
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
    split = split_of_updates(data, args, accelerator.num_processes)
    if args.cuda_graphs:
        if (problem := cuda_graphs_refusal(accelerator, args.torch_compile, split.accumulation)) is not None:
            raise TrainingError(problem)
    if args.chunked_loss and (problem := chunked_loss_refusal(accelerator)) is not None:
        raise TrainingError(problem)
    apart = processes_apart(accelerator.num_processes, f"Accelerate sees {accelerator.num_processes}",
                            "set ACCELERATE_USE_CPU=1 (`ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu "
                            "--num_processes N ...`)")
    if apart is not None:
        raise TrainingError(apart)
    lock = prepare_output_dir(accelerator, output_dir, args, run_inputs(data, model_args))
    try:
        return _prepare_run(accelerator, lock, data, model_args, args, split)
    except BaseException:
        if lock is not None:
            release_output_dir(lock)
        raise


def split_of_updates(data: TrainDataArguments, args: TrainArguments, num_processes: int) -> UpdateSplit:
    """The micro-batches of every update on `num_processes` processes (`batching.update_split`), refused where
    --exact_tokens_per_update cuts them below the longest pair the run keeps."""
    split = update_split(args.tokens_per_update, args.max_tokens_per_batch, num_processes,
                         args.exact_tokens_per_update)
    longest = max(data.max_source_length, data.max_target_length)
    if split.micro_batch_tokens < longest:
        raise TrainingError(
            f"--exact_tokens_per_update with --tokens_per_update {args.tokens_per_update} on {num_processes} "
            f"processes makes micro-batches of {split.micro_batch_tokens} tokens, fewer than the longest allowed "
            f"sequence ({longest} tokens, from --max_source_length/--max_target_length); allowed: micro-batches of at "
            f"least {longest}: raise --tokens_per_update or lower the lengths."
        )
    return split


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
                args: TrainArguments, split: UpdateSplit) -> Run:
    output_dir = Path(args.output_dir)
    set_seed(args.seed)

    # the first process loads, learns and tokenizes; the others then read its caches (waiting as long as it takes)
    waits = SetUpWaits(accelerator)
    with waits.local_main_process_first():
        train_raw, validation_raw = load_raw_splits(data, output_dir, args.seed)
    tokenizer = obtain_tokenizer(accelerator, model_args, train_raw, data, output_dir, waits.wait_for_everyone)
    fingerprints = input_fingerprints(accelerator, data, output_dir, train_raw, validation_raw, tokenizer,
                                      model_args.tokenizer)
    model = build_model(model_args, data, args, tokenizer)
    with waits.local_main_process_first():
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
    accumulation = split.accumulation
    accelerator.gradient_accumulation_steps = accumulation
    fit_deepspeed_config(accelerator, accumulation)
    shapes = (BatchShapes(split.micro_batch_tokens, model.config.max_position_embeddings)
              if args.torch_compile or args.cuda_graphs else None)
    model, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
    update_model = ChunkedLossUpdates(model, autocast_dtype(accelerator)) if args.chunked_loss else model
    if args.torch_compile:
        update_model = compiled_for_updates(accelerator, update_model)
    if args.cuda_graphs:
        update_model = UpdateGraphs(update_model) if args.torch_compile else GraphedUpdates(update_model)

    resegmented = BpeDropoutEpochs(prepared.train, tokenizer, data, accelerator) if data.bpe_dropout > 0 else None
    batches = TokenBudgetBatches(
        *prepared.train_lengths, split.micro_batch_tokens, args.seed,
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
        resume(run, peak_learning_rate)
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
        f"{accelerator.num_processes} process(es) x {accumulation} micro-batch(es) of <= {split.micro_batch_tokens} "
        f"tokens per update = {split.update_tokens(accelerator.num_processes):,} tokens a side (target "
        f"{args.tokens_per_update:,}{', exact' if args.exact_tokens_per_update else ''}); peak learning rate "
        f"{peak_learning_rate:.2e}; "
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


__all__ = [
    "COMPILE_BACKEND",
    "check_engine",
    "check_mixed_precision_applies",
    "check_mixed_precision_value",
    "compiled_for_updates",
    "default_mixed_precision",
    "fit_deepspeed_config",
    "installed",
    "set_up",
]
