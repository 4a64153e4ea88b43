"""The GPU suite of scripts/tools/gpu_suite.py (the project's GPU targets, results/benchmark/README.md; its parts,
sizes and files are described in the command's docstring): training speed (MFU) of the real update beside Marian's,
the DeepSpeed and FSDP engines really engaged, and the Multi30k en->de recipe on a clock, each part in processes of
its own within a time limit of its own, into one JSON report and its markdown tables. It runs the checkout's scripts
(`Suite.repo`), and refuses an installed package that is not that checkout's source.
"""

import gc
import importlib.metadata
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path

import torch

import vaswani
from vaswani.output_paths import check_output_dir, write_text_atomically

from .gpu_generation import MODEL, GenerationSizes, generation_worker

# in the order they run: a cut run (the suite's seconds spent, or the device command stopped) still has the first
PARTS = ("training", "recipe", "generation", "engines")
PAPER_UPDATES = {"base": 100_000, "big": 300_000}  # the paper's training runs (section 5.2), projected from the rows
MIN_PART_SECONDS = 30  # a part with less of the suite's time left is not started
ENGINES = ("ddp", "deepspeed", "fsdp")
RECIPE_CONFIG = Path("scripts") / "configs" / "multi30k_en_de_gpu.yaml"  # in the checkout, as every path below
MULTI30K_FILES = ("train.jsonl", "validation.jsonl", "test_2016_flickr.jsonl")
JSON_FILE, TABLE_FILE, LOG_FILE = "gpu_suite.json", "gpu_suite.md", "gpu_suite.log"
PACKAGES = ("transformers", "accelerate", "deepspeed", "datasets", "vaswani-transformer")  # their versions in the JSON


@dataclass(frozen=True)
class Sizes:
    """Everything that differs between the GPU run and the dry run: sizes and time limits, nothing else."""

    presets: tuple[str, ...]
    batch_size: int  # pairs in the training rows' one micro-batch
    length: int  # source and target tokens of each pair
    vocab_size: int
    warmup_updates: int  # before timing (they include compilation)
    timed_updates: int
    matmul_size: int  # the peak probe: products of this size ...
    matmul_per_round: int  # ... this many between two synchronizations
    recipe_batch: tuple[int, int]  # the recipe model's row: pairs x tokens a side of its one micro-batch
    profiled_updates: int  # after a row's timed updates, under torch.profiler
    engine_options: tuple[str, ...]  # train.py options of the engine runs
    recipe_options: tuple[str, ...]  # train.py options on top of the recipe's config
    evaluate_options: tuple[str, ...]  # evaluate_model.py options on top of the recipe's decoding
    generation: GenerationSizes
    seconds: dict  # time limit of each part
    total_seconds: int | None  # of the whole suite (a part gets what is left, at most its own); None: no limit
    compile_seconds: int  # added to the recipe's with --train_py_compile yes
    evaluation_seconds: int  # of the recipe's time, kept for scoring the model (the rest is train.py's)


ENGINE_RUN = (
    "--dataset_name", "synthetic", "--max_source_length", "64", "--max_target_length", "64", "--warmup_steps", "10",
    "--logging_steps", "5", "--eval_steps", "100000", "--save_steps", "100000", "--keep_checkpoints", "1",
    "--eval_num_beams", "1", "--eval_max_new_tokens", "16", "--report_to", "none", "--seed", "0",
    "--mixed_precision", "bf16",
)
SIZES = {
    "gpu": Sizes(
        # 392 x 64 = 25,088 tokens a side, the paper's batches; its shared en-de vocabulary of about 37,000 pieces
        presets=("base", "big"), batch_size=392, length=64, vocab_size=37000,
        warmup_updates=3, timed_updates=20, matmul_size=8192, matmul_per_round=10,
        recipe_batch=(170, 24), profiled_updates=3,  # 4,080 tokens a side: the recipe's update, of caption lengths
        engine_options=ENGINE_RUN + (
            "--preset", "base", "--vocab_size", "8000", "--synthetic_train_size", "8000",
            "--synthetic_validation_size", "32", "--max_eval_samples", "16", "--max_tokens_per_batch", "8192",
            "--tokens_per_update", "16384", "--max_steps", "8",
        ),
        # the config as it is: the CPU recipe's updates (9,000 of 4,096 tokens, its warmup and cooldown: 41.43 BLEU on
        # the CPU) replayed from CUDA graphs (results/multi30k_en_de_gpu/notes.md)
        recipe_options=(),
        evaluate_options=(),
        # ceilings, 590 s in all (a device command has 600, the install about 20 of them). An H100 used 182 s of
        # 210 for training (without the compiled graphs' row and the loss alone), and 206 s for the recipe of 3,200
        # updates, 153 s of it training; the recipe's 9,000 updates from graphs should train in under 180 s alone
        # (else: --only recipe --seconds N). Generation: 2,048 captions in batches of 64, greedy and beam 4, each
        # engine, the compiled rows last (each search compiles its step in its untimed first call). The engines part
        # runs on what is left: it took 112 s on an H100, 119 s on an H200, and showed DDP, DeepSpeed and FSDP
        # engaging on both (results/benchmark/runs/); `--only engines` runs it alone
        generation=GenerationSizes(captions=2048, batch_size=64, max_new_tokens=None),
        seconds={"training": 230, "recipe": 235, "generation": 150, "engines": 125},
        total_seconds=590,
        compile_seconds=120,
        evaluation_seconds=45,
    ),
    "dry_run": Sizes(
        presets=("tiny",), batch_size=4, length=8, vocab_size=500,
        warmup_updates=1, timed_updates=2, matmul_size=128, matmul_per_round=1,
        recipe_batch=(4, 8), profiled_updates=1,
        engine_options=ENGINE_RUN + (
            "--preset", "tiny", "--vocab_size", "400", "--synthetic_train_size", "120",
            "--synthetic_validation_size", "8", "--max_eval_samples", "4", "--max_tokens_per_batch", "256",
            "--tokens_per_update", "512", "--max_steps", "2", "--cpu_threads", "1",  # two micro-batches, as on a GPU
        ),
        # the config's run, shortened; eager (a CPU replays no CUDA graphs)
        recipe_options=(
            "--max_steps", "2", "--warmup_steps", "1", "--cooldown_steps", "0", "--max_tokens_per_batch", "128",
            "--tokens_per_update", "128", "--max_eval_samples", "4", "--eval_num_beams", "1",
            "--eval_max_new_tokens", "8", "--cpu_threads", "1", "--cuda_graphs", "false",
        ),
        evaluate_options=("--max_new_tokens", "8", "--num_beams", "1"),
        generation=GenerationSizes(captions=6, batch_size=4, max_new_tokens=8),
        seconds={"training": 240, "recipe": 240, "generation": 240, "engines": 300},
        total_seconds=None,
        compile_seconds=0,
        evaluation_seconds=120,
    ),
}


def _on_gpu() -> bool:
    return torch.cuda.is_available()


# --- the training part (its own process) ---------------------------------------------------------------------------


def _training_worker(sizes: Sizes, work_dir: Path) -> None:
    """Measure the training rows, each written to work_dir/training.jsonl as soon as it is measured (the part's time
    limit may stop this process before the last); a row that fails is written as its error and the next one runs."""
    from accelerate import Accelerator

    from .benchmarking import Setup, matmul_peak

    device = "cuda" if _on_gpu() else "cpu"
    out = work_dir / "training.jsonl"
    accelerator = Accelerator(mixed_precision="bf16", step_scheduler_with_optimizer=False)  # as train.py's
    probe = Setup(sizes.presets[0], "bf16", 1, 1, 1, sizes.vocab_size, device)
    peak = matmul_peak(probe, torch.bfloat16, size=sizes.matmul_size, per_round=sizes.matmul_per_round)
    _write_record(out, {"record": "peak", "bf16_flops": peak})
    print(f"bf16 matrix-multiply peak: {peak / 1e12:.1f} TFLOP/s", flush=True)
    # the output layer's loss of the first preset's update, full and chunked (--chunked_loss), alone: seconds
    try:
        loss = _measure_loss(Setup(sizes.presets[0], "bf16", sizes.batch_size, sizes.length, sizes.length,
                                   sizes.vocab_size, device), sizes)
    except Exception as error:  # noqa: BLE001 - reported; the rows stand without it
        loss = {"error": f"{type(error).__name__}: {error}"}
    _write_record(out, {"record": "loss", **loss})
    # the recipe's own model and update first (a second of the part's time), then the presets, compiled last
    pairs, length = sizes.recipe_batch
    recipe = _recipe_model()
    recipe_setup = Setup(recipe["preset"], "fp32", pairs, length, length, recipe["vocab_size"], device)
    plan = [(recipe["name"], recipe_setup, recipe["options"], "vaswani", False, False)]
    for compiled in (False, True):
        for preset in sizes.presets:
            setup = Setup(preset, "bf16", sizes.batch_size, sizes.length, sizes.length, sizes.vocab_size, device)
            models = ("vaswani",) if compiled else ("vaswani", "marian")
            plan += [(preset, setup, {}, model, compiled, False) for model in models]
    # last, the updates replayed from CUDA graphs: a capture that fails can leave the device unusable for this
    # process, and no row without graphs comes after them. The recipe's eager update (train.py --cuda_graphs), then
    # the first preset's compiled update with its step (train.py --cuda_graphs --torch_compile)
    plan.append((recipe["name"], recipe_setup, recipe["options"], "vaswani", False, True))
    first = Setup(sizes.presets[0], "bf16", sizes.batch_size, sizes.length, sizes.length, sizes.vocab_size, device)
    plan.append((sizes.presets[0], first, {}, "vaswani", True, True))
    for label, setup, options, model_name, compiled, graphed in plan:
        name = f"{label} {model_name}{' compiled' if compiled else ''}{' CUDA graphs' if graphed else ''}"
        try:
            row = _measure_training(accelerator, setup, model_name, compiled, sizes, peak, work_dir,
                                    label=label, options=options, graphed=graphed)
        except Exception as error:  # noqa: BLE001 - a row that fails (out of memory, a compiler error) is reported
            _write_record(out, {"record": "error", "row": name, "error": f"{type(error).__name__}: {error}"})
            print(f"{name}: {type(error).__name__}: {error}", flush=True)
        else:
            _write_record(out, {"record": "row", **row})
            print(f"{name}: {row['tokens_per_s']:,.0f} tokens/s, MFU {row['mfu']:.1%}", flush=True)
        finally:
            _release(accelerator)


def _recipe_model() -> dict:
    """The model of the Multi30k GPU recipe, read from its config (the checkout is this process's folder): its
    preset, vocabulary and the config_overrides on top of the preset."""
    import yaml

    config = yaml.safe_load(RECIPE_CONFIG.read_text(encoding="utf-8"))
    return {"name": RECIPE_CONFIG.stem, "preset": config["preset"], "vocab_size": config["vocab_size"],
            "options": dict(config.get("config_overrides") or {})}


def _measure_training(accelerator, setup, model_name: str, compiled: bool, sizes: Sizes, peak: float,
                     work_dir: Path, label: str, options: dict, graphed: bool = False) -> dict:
    """One training row: seconds per update of `sizes.timed_updates` updates after the warm-up ones, each update
    the real one of scripts/train.py on one micro-batch of random tokens (with `setup.precision` as train.py's
    --mixed_precision; `graphed`: replayed from CUDA graphs, as --cuda_graphs does, its forward and backward, and
    compiled, the whole update with the optimizer's step as --cuda_graphs --torch_compile does; the warm-up updates
    capture them; the dry run's stand-in runs the work as it is); then `sizes.profiled_updates` more under
    torch.profiler (`_profile`). Peak memory: the allocator's high-water mark of tensors, and of the memory it
    reserved from the GPU, which holds the CUDA graphs' private pool (their tensors are allocated only while they
    are captured, before the timed updates)."""
    from torch._dynamo.utils import counters

    from vaswani import VaswaniConfig
    from vaswani.training.arguments import TrainArguments
    from vaswani.training.cuda_graphs import GraphedUpdates, UpdateGraphs
    from vaswani.training.optimization import build_optimizer_and_schedule, paper_peak_learning_rate
    from vaswani.training.state import TrainingProgress
    from vaswani.training.update import run_update

    from .benchmarking import make_batch, marian_model, synchronize, training_flops, vaswani_model

    torch.manual_seed(0)
    model = vaswani_model(setup, **options) if model_name == "vaswani" else marian_model(setup)
    precision = {"bf16": "bf16", "fp32": "no"}[setup.precision]
    args = TrainArguments(output_dir=str(work_dir / "training"), mixed_precision=precision)
    optimizer, schedule = build_optimizer_and_schedule(
        model, paper_peak_learning_rate(model.config.d_model, args.warmup_steps), args.warmup_steps,
        (args.adam_beta1, args.adam_beta2), args.adam_epsilon, args.weight_decay, max_steps=args.max_steps,
        fused=True if compiled and graphed else None,  # the graphed step is fused Adam's (also on the dry run's CPU)
    )
    accelerator.gradient_accumulation_steps = 1
    amp, accelerator.native_amp = accelerator.native_amp, accelerator.native_amp and setup.precision == "bf16"
    try:  # prepare() wraps the forward in bf16 autocast where native_amp says so
        model, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
    finally:
        accelerator.native_amp = amp
    if compiled:
        model = torch.compile(model, backend="inductor" if _on_gpu() else "eager")
    if graphed and compiled:
        model = UpdateGraphs(model, capture=None if _on_gpu() else (lambda work: work))
    elif graphed:
        model = GraphedUpdates(model, capture=None if _on_gpu() else (lambda module, sample_args: module))
    micro_batches = [make_batch(replace(setup, device="cpu"))]  # on the host, as collate gives them
    progress = TrainingProgress()
    for _ in range(sizes.warmup_updates):
        run_update(accelerator, model, optimizer, schedule, micro_batches, args, progress)
    synchronize(setup)
    if _on_gpu():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    tokens = 0
    for _ in range(sizes.timed_updates):
        tokens += run_update(accelerator, model, optimizer, schedule, micro_batches, args, progress)[1]
    synchronize(setup)
    seconds = (time.perf_counter() - started) / sizes.timed_updates
    peak_memory = torch.cuda.max_memory_allocated() / 2**20 if _on_gpu() else None
    peak_reserved = torch.cuda.max_memory_reserved() / 2**20 if _on_gpu() else None
    try:
        profile = _profile(lambda: run_update(accelerator, model, optimizer, schedule, micro_batches, args, progress),
                           setup, sizes.profiled_updates)
    except Exception as error:  # noqa: BLE001 - the row's numbers stand without its profile
        profile = {"error": f"{type(error).__name__}: {error}"}
    # Marian's too: the same shapes
    config = VaswaniConfig.from_preset(setup.preset, vocab_size=setup.vocab_size, **options)
    return {
        "preset": label,
        "model": model_name,
        "precision": setup.precision,
        "compiled": compiled,
        "cuda_graphs": graphed,
        "tokens_per_update": setup.batch_size * setup.target_length,  # target tokens, as --tokens_per_update counts
        "tokens_per_s": tokens / sizes.timed_updates / seconds,  # source + target, as train.py reports
        "seconds_per_update": seconds,
        "mfu": training_flops(config, setup) / seconds / peak,
        "peak_memory_mib": peak_memory,
        # what the process held from the GPU at most, the graphs' pool included; None on a CPU (the dry run)
        "peak_reserved_mib": peak_reserved,
        "graph_breaks": sum(counters["graph_break"].values()) if compiled else None,
        "profile": profile,
    }


def _measure_loss(setup, sizes: Sizes) -> dict:
    """The output layer's loss of `setup`'s update alone, forward and backward, eager: as the model computes it (the
    logits of every target token, float32 cross-entropy with label smoothing 0.1) and by --chunked_loss
    (`linear_cross_entropy`), in bf16 as the presets' rows; milliseconds per loss (the mean of
    `sizes.timed_updates` after one warm-up) and, on a GPU, the peak of tensors each allocated beyond its inputs."""
    import torch.nn.functional as F

    from vaswani import VaswaniConfig
    from vaswani.training.chunked_loss import linear_cross_entropy

    from .benchmarking import synchronize

    config = VaswaniConfig.from_preset(setup.preset, vocab_size=setup.vocab_size)
    rows = setup.batch_size * setup.target_length
    torch.manual_seed(0)
    hidden = torch.randn(rows, config.d_model, device=setup.device, requires_grad=True)
    weight = (torch.randn(config.vocab_size, config.d_model, device=setup.device) * 0.05).requires_grad_()
    labels = torch.randint(0, config.vocab_size, (rows,), device=setup.device)

    def full():
        logits = hidden.to(torch.bfloat16) @ weight.to(torch.bfloat16).T
        return F.cross_entropy(logits.float(), labels, ignore_index=-100, label_smoothing=0.1)

    def chunked():
        return linear_cross_entropy(hidden, weight, labels, 0.1, compute_dtype=torch.bfloat16)

    measured = {"tokens": rows, "vocab_size": config.vocab_size, "d_model": config.d_model}
    for way, loss_of in (("full", full), ("chunked", chunked)):
        loss_of().backward()  # warm-up
        hidden.grad = weight.grad = None
        synchronize(setup)
        if _on_gpu():
            torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated() if _on_gpu() else 0
        started = time.perf_counter()
        for _ in range(sizes.timed_updates):
            loss_of().backward()
            hidden.grad = weight.grad = None
        synchronize(setup)
        measured[f"{way}_ms"] = (time.perf_counter() - started) * 1000 / sizes.timed_updates
        measured[f"{way}_peak_mib"] = (torch.cuda.max_memory_allocated() - base) / 2**20 if _on_gpu() else None
    return measured


def _profile(update, setup, updates: int, top: int = 6) -> dict:
    """Where an update's time goes: `updates` calls of `update` under torch.profiler. On a GPU: the wall time per
    update, the kernels it launches, the share of the wall time the GPU spends in them (`busy`: low means the update
    waits on the host, launching), and the kernels of most GPU time; on a CPU (the dry run) the same from the
    operators the host runs (no `busy`)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    from .benchmarking import synchronize

    on_gpu = setup.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    synchronize(setup)
    with profile(activities=activities) as profiler:
        started = time.perf_counter()
        for _ in range(updates):
            update()
        synchronize(setup)
        wall = time.perf_counter() - started
    if on_gpu:
        events = [event for event in profiler.events() if event.device_type == DeviceType.CUDA]
    else:  # the operators the update called itself, not those they call
        events = [event for event in profiler.events()
                  if event.name.startswith("aten::") and (event.cpu_parent is None
                                                          or not event.cpu_parent.name.startswith("aten::"))]
    totals: dict[str, list[float]] = {}
    for event in events:
        total = totals.setdefault(event.name, [0, 0.0])
        total[0] += 1
        total[1] += event.time_range.elapsed_us() / 1000
    busy = sum(milliseconds for _, milliseconds in totals.values()) / (wall * 1000) if on_gpu else None
    ranked = sorted(totals.items(), key=lambda item: -item[1][1])[:top]
    return {
        "updates": updates,
        "ms_per_update": wall * 1000 / updates,
        "kernels_per_update": len(events) / updates,
        "busy": busy,
        "top": [{"name": name[:100], "calls_per_update": calls / updates, "ms_per_update": milliseconds / updates}
                for name, (calls, milliseconds) in ranked],
    }


def _release(accelerator) -> None:
    """Forget the row's model, optimizer and compiled graphs before the next row."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    accelerator.free_memory()
    torch._dynamo.reset()
    counters.clear()
    gc.collect()
    if _on_gpu():
        torch.cuda.empty_cache()


def _write_record(path: Path, record: dict) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps(record) + "\n")


def _read_records(path: Path) -> list[dict]:
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


# --- running the parts ----------------------------------------------------------------------------------------------


@dataclass
class Suite:
    """What every part needs: where to write, the sizes, the log, the environment of the processes."""

    sizes: Sizes
    work_dir: Path
    output_dir: Path
    log_path: Path
    dry_run: bool
    train_py_compile: bool  # pass --torch_compile to the recipe's train.py
    multi30k_dir: Path
    env: dict
    repo: Path  # the checkout: its scripts and configs (the package may be a wheel installed elsewhere)


@dataclass
class Finished:
    status: int | None  # None: stopped at its time limit
    output: str
    seconds: float


def _run_logged(suite: Suite, command: list[str], seconds: float, env: dict | None = None) -> Finished:
    """Run `command` from the repository in a process group of its own, its output appended to the log; after
    `seconds` stop the whole group (accelerate launch starts the training process under torchrun)."""
    command = [str(part) for part in command]
    with suite.log_path.open("a", encoding="utf-8") as log:
        log.write(f"\n$ {shlex.join(command)}\n")
        log.flush()
        start_offset = log.tell()
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=suite.repo, stdout=log, stderr=subprocess.STDOUT,
                                   env=env or suite.env, start_new_session=True)
        try:
            status = process.wait(timeout=max(seconds, 1))
        except subprocess.TimeoutExpired:
            _stop_group(process)
            status = None
    with suite.log_path.open("rb") as log:
        log.seek(start_offset)
        output = log.read().decode("utf-8", errors="replace")
    return Finished(status, output, time.perf_counter() - started)


def _stop_group(process: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 10), (signal.SIGKILL, 10)):
        try:
            os.killpg(process.pid, sig)
        except ProcessLookupError:
            return
        try:
            process.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _failure(finished: Finished, seconds: float) -> str | None:
    """None for a process that succeeded; else one line saying why it did not."""
    if finished.status == 0:
        return None
    if finished.status is None:
        return f"stopped at its time limit ({seconds:.0f} s)"
    return f"exit status {finished.status}: {error_line(finished.output)}"


def error_line(output: str) -> str:
    """The line that says what went wrong: a script's own one-line error (`train.py: error: ...`), else the last
    exception line of a traceback, else the last line."""
    lines = [line.strip() for line in output.replace("\r", "\n").splitlines() if line.strip()]
    for line in reversed(lines):
        if ".py: error: " in line:
            return line
    for line in reversed(lines):
        head = line.split(":", 1)[0]
        if head.isidentifier() and head.endswith(("Error", "Exception", "Interrupt")):
            return line
    return lines[-1] if lines else "no output"


def _run_worker(suite: Suite, worker: str, seconds: float, options: tuple = ()) -> tuple[list[dict], Finished]:
    """Run gpu_suite.py's `--worker` process of a part within `seconds`: the records it wrote to the work folder
    (`WORKER.jsonl`, one a line, as it measured them), and how it finished."""
    records_file = suite.work_dir / f"{worker}.jsonl"
    records_file.unlink(missing_ok=True)
    command = [sys.executable, suite.repo / "scripts" / "tools" / "gpu_suite.py", "--worker", worker,
               "--work_dir", suite.work_dir, *options]
    finished = _run_logged(suite, command + (["--dry_run"] if suite.dry_run else []), seconds)
    return _read_records(records_file), finished


def _run_training(suite: Suite, seconds: float) -> tuple[dict, str | None]:
    records, finished = _run_worker(suite, "training", seconds)
    peak = next((record["bf16_flops"] for record in records if record["record"] == "peak"), None)
    loss = next(({k: v for k, v in record.items() if k != "record"} for record in records
                 if record["record"] == "loss"), None)
    rows = [{k: v for k, v in record.items() if k != "record"} for record in records if record["record"] == "row"]
    errors = [f"{record['row']}: {record['error']}" for record in records if record["record"] == "error"]
    if (problem := _failure(finished, seconds)) is not None:
        errors.append(problem)
    return {"peak_flops_bf16": peak, "loss": loss, "training": rows}, "; ".join(errors) or None


def _run_generation(suite: Suite, seconds: float) -> tuple[dict, str | None]:
    """The generation rows (vaswani_tools.gpu_generation), measured in a process of their own."""
    validation_file = suite.multi30k_dir / "validation.jsonl"
    if not validation_file.is_file():
        return {"generation": []}, (f"--multi30k_dir {suite.multi30k_dir} lacks validation.jsonl: name the folder "
                                    "of the Multi30k JSON Lines files")
    rows, finished = _run_worker(suite, "generation", seconds, ("--multi30k_dir", suite.multi30k_dir))
    return {"generation": rows}, _failure(finished, seconds)


def _run_engines(suite: Suite, seconds: float) -> tuple[dict, str | None]:
    """One run of train.py under each engine's Accelerate config, one process; each gets an equal share of what is
    left of the part's time."""
    deadline = time.perf_counter() + seconds
    env = dict(suite.env)
    if not _on_gpu():
        env["ACCELERATE_USE_CPU"] = "1"  # DDP on CPU processes; DeepSpeed and FSDP still ask for GPUs
    rows = []
    for left, engine in zip(range(len(ENGINES), 0, -1), ENGINES):
        share = (deadline - time.perf_counter()) / left
        output_dir = suite.work_dir / f"engine_{engine}"
        shutil.rmtree(output_dir, ignore_errors=True)
        command = [
            sys.executable, "-m", "accelerate.commands.launch",
            "--config_file", suite.repo / "scripts" / "configs" / f"accelerate_{engine}.yaml", "--num_processes", "1",
            "--main_process_port", "0",  # a free port: whatever else runs on the machine may hold the default, 29500
            suite.repo / "scripts" / "train.py", *suite.sizes.engine_options, "--output_dir", output_dir,
        ]
        finished = _run_logged(suite, command, share, env)
        rows.append(_engine_row(engine, finished, share, output_dir))
        print(f"  {engine}: engaged {rows[-1]['engaged']} ({rows[-1]['distributed_type']})", flush=True)
    return {"engines": rows}, None


def _expected_distributed_type(engine: str) -> str:
    """What Accelerate reports when the engine is engaged (accelerate.utils.DistributedType's values)."""
    return {"ddp": "MULTI_GPU" if _on_gpu() else "MULTI_CPU", "deepspeed": "DEEPSPEED", "fsdp": "FSDP"}[engine]


def _engine_row(engine: str, finished: Finished, seconds: float, output_dir: Path) -> dict:
    """The run's own account: its summary.json, which train.py writes when its training is over (also where the
    process then outlived its time: on a lent H100 a run that had trained, evaluated and saved was still ending when
    its share ran out); else what its error says Accelerate set up."""
    summary = _read_json(output_dir / "summary.json")
    if summary is not None:
        distributed_type = summary.get("distributed_type", "unknown")
        logged = [record for record in _read_records(output_dir / "metrics.jsonl") if "tokens_per_second" in record]
        # the last logging window: steady updates, without the first one's set-up (and compilation)
        tokens_per_s = logged[-1]["tokens_per_second"] if logged else summary["tokens_per_second"]
        peak_memory = summary.get("peak_memory_mib")
    else:
        distributed_type, tokens_per_s, peak_memory = refused_distributed_type(finished.output), None, None
    return {
        "engine": engine,
        "engaged": summary is not None and distributed_type == _expected_distributed_type(engine),
        "distributed_type": distributed_type,
        "tokens_per_s": tokens_per_s,
        "peak_memory_mib": peak_memory,
        "seconds": round(finished.seconds, 1),
        "error": _failure(finished, seconds) if summary is None or finished.status is None else None,
    }


def refused_distributed_type(output: str) -> str:
    """What Accelerate set up in a run that train.py stopped because the config's engine could not engage
    (vaswani.training.engine.check_engine says "... but Accelerate set up MULTI_CPU on cpu ..."); "none" when the run
    stopped before (DeepSpeed not installed, a crash)."""
    marker = "but Accelerate set up "
    for line in reversed(output.splitlines()):
        if marker in line:
            return line.split(marker, 1)[1].split()[0]
    return "none"


def _run_recipe(suite: Suite, seconds: float) -> tuple[dict, str | None]:
    """Train the GPU recipe, then score its last model on test_2016_flickr with the recipe's decoding."""
    deadline = time.perf_counter() + seconds
    recipe = {"name": RECIPE_CONFIG.stem, "options": list(suite.sizes.recipe_options) + _compile_option(suite),
              "tokenized_bleu": None, "sacrebleu": None, "training_seconds": None, "steps": None,
              "tokens_per_s": None}
    missing = [name for name in MULTI30K_FILES if not (suite.multi30k_dir / name).is_file()]
    if missing:
        return {"recipe": recipe}, (f"--multi30k_dir {suite.multi30k_dir} lacks {', '.join(missing)}: name the "
                                    "folder of the Multi30k JSON Lines files")
    output_dir = suite.work_dir / "recipe"
    shutil.rmtree(output_dir, ignore_errors=True)
    train = [
        sys.executable, suite.repo / "scripts" / "train.py", "--config", suite.repo / RECIPE_CONFIG,
        "--train_file", suite.multi30k_dir / "train.jsonl",
        "--validation_file", suite.multi30k_dir / "validation.jsonl",
        *suite.sizes.recipe_options, *_compile_option(suite), "--output_dir", output_dir,
    ]
    limit = seconds - suite.sizes.evaluation_seconds
    if (problem := _failure(_run_logged(suite, train, limit), limit)) is not None:
        return {"recipe": recipe}, f"train.py: {problem}"
    summary = _read_json(output_dir / "summary.json")
    recipe.update(training_seconds=summary["train_seconds"], steps=summary["steps"],
                  tokens_per_s=summary["tokens_per_second"])
    shutil.copy(output_dir / "summary.json", suite.output_dir / "recipe_training_summary.json")
    results_file = output_dir / "evaluation_results.json"
    evaluate = [
        sys.executable, suite.repo / "scripts" / "evaluate_model.py", "--model", output_dir / "last", "--task",
        "translation",
        "--test_file", suite.multi30k_dir / "test_2016_flickr.jsonl", "--dataset_label", "bentrevett/multi30k",
        "--split", "test_2016_flickr", "--source_column", "en", "--target_column", "de", "--num_beams", "5",
        "--length_penalty", "1.0", "--max_new_tokens", "80", "--batch_size", "100", "--diagnostic_examples", "0",
        *suite.sizes.evaluate_options, "--output_file", results_file,
    ]
    limit = deadline - time.perf_counter()
    if (problem := _failure(_run_logged(suite, evaluate, limit), limit)) is not None:
        return {"recipe": recipe}, f"evaluate_model.py: {problem}"
    shutil.copy(results_file, suite.output_dir / "recipe_evaluation_results.json")
    scores = {metric["type"]: metric["value"] for metric in _read_json(results_file)["metrics"]}
    recipe.update(tokenized_bleu=scores.get("tokenized_bleu"), sacrebleu=scores.get("sacrebleu"))
    return {"recipe": recipe}, None


def _read_json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def _compile_option(suite: Suite) -> list[str]:
    return ["--torch_compile"] if suite.train_py_compile else []


RUNNERS = {"training": _run_training, "recipe": _run_recipe, "generation": _run_generation, "engines": _run_engines}


# --- the report -----------------------------------------------------------------------------------------------------


def _device_name() -> str:
    from .benchmarking import cpu_name

    return torch.cuda.get_device_name() if _on_gpu() else cpu_name()


def _installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def _new_report(dry_run: bool, train_py_compile: bool) -> dict:
    return {
        "device": _device_name(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "packages": {name: _installed_version(name) for name in PACKAGES},  # what the carried wheels gave
        "dry_run": dry_run,
        "train_py_torch_compile": train_py_compile,
        "peak_flops_bf16": None,
        "loss": None,  # the output layer's loss alone, full and chunked (`_measure_loss`)
        "training": [],
        "engines": [],
        "recipe": None,
        "generation": [],  # vaswani_tools.gpu_generation's rows
        "projection": [],  # the paper's training runs in hours, from the training rows (`projection`)
        "seconds": {},
        "errors": {},
    }


def _starting_report(json_path: Path, only: str | None, dry_run: bool, train_py_compile: bool) -> dict:
    """A new report; with --only, the existing one of the same device, whose other parts stay."""
    report = _new_report(dry_run, train_py_compile)
    existing = _read_json(json_path) if only else None
    if existing is not None and existing.get("device") == report["device"]:
        for key in ("date", "torch", "packages", "dry_run", "train_py_torch_compile"):
            existing[key] = report[key]
        existing.setdefault("errors", {}).pop(only, None)
        return existing
    return report


def _number(value, style: str) -> str:
    if value is None:
        return "—"
    return {"count": f"{value:,.0f}", "percent": f"{value:.1%}", "score": f"{value:.2f}"}[style]


def _update_path(row: dict) -> str:
    """The "compiled" column: yes, no, CUDA graphs (eager), or yes + CUDA graphs (rows of earlier runs have no
    cuda_graphs field)."""
    if row.get("cuda_graphs"):
        return "yes + CUDA graphs" if row["compiled"] else "CUDA graphs"
    return "yes" if row["compiled"] else "no"


def projection(training_rows: list[dict]) -> list[dict]:
    """The paper's training runs (PAPER_UPDATES: base 100,000 updates, big 300,000, each of about 25,000 tokens a
    side) in hours at the speed of each preset's fastest row of this project's update: on one GPU, and on 8 as that
    time over 8, an upper bound on the speed (each GPU would compute an eighth of the update, at a lower rate than a
    whole one, and the gradients' all-reduce is not measured)."""
    rows = []
    for preset, updates in PAPER_UPDATES.items():
        measured = [row for row in training_rows if row["preset"] == preset and row["model"] == "vaswani"
                    and row.get("seconds_per_update")]
        if not measured:
            continue
        fastest = min(measured, key=lambda row: row["seconds_per_update"])
        hours = updates * fastest["seconds_per_update"] / 3600
        rows.append({"preset": preset, "updates": updates, "update": _update_path(fastest),
                     "tokens_per_update": fastest["tokens_per_update"], "tokens_per_s": fastest["tokens_per_s"],
                     "hours_1_gpu": hours, "hours_8_gpus": hours / 8})
    return rows


def markdown(report: dict) -> str:
    """The run's tables in Markdown, as a run's file in results/benchmark/runs/ shows them."""
    peak = report.get("peak_flops_bf16")
    lines = [
        f"{report['device']}, torch {report['torch']}, {report['date']}"
        + (f"; bf16 matrix-multiply peak {peak / 1e12:,.1f} TFLOP/s (measured in the run)" if peak else "")
        + (" (dry run: tiny sizes)" if report.get("dry_run") else ""),
        "",
        "| preset | model | precision | compiled | target tokens / update | tokens/s (source + target) | MFU "
        "| peak memory (MiB) | peak reserved, graphs' pool included (MiB) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in report["training"]:
        lines.append(
            f"| {row['preset']} | {row['model']} | {row['precision']} | {_update_path(row)} "
            f"| {_number(row['tokens_per_update'], 'count')} | {_number(row['tokens_per_s'], 'count')} "
            f"| {_number(row['mfu'], 'percent')} | {_number(row['peak_memory_mib'], 'count')} "
            f"| {_number(row.get('peak_reserved_mib'), 'count')} |"
        )
    loss = report.get("loss")
    if loss and "error" not in loss:
        lines += ["", "| output layer's loss alone, bf16 | tokens | vocabulary | ms (forward + backward) "
                  "| peak memory beyond the inputs (MiB) |", "|---|---|---|---|---|"]
        for way, name in (("full", "full logits (the model's)"), ("chunked", "chunked (--chunked_loss)")):
            lines.append(f"| {name} | {_number(loss['tokens'], 'count')} | {_number(loss['vocab_size'], 'count')} "
                         f"| {loss[f'{way}_ms']:.2f} | {_number(loss[f'{way}_peak_mib'], 'count')} |")
    profiled = [row for row in report["training"] if row.get("profile") and "error" not in row["profile"]]
    if profiled:
        lines += ["", "| preset | model | compiled | ms / update | kernels / update | GPU busy | most GPU time |",
                  "|---|---|---|---|---|---|---|"]
        for row in profiled:
            profile = row["profile"]
            most = "; ".join(f"{kernel['name'][:40]} {kernel['ms_per_update']:.2f} ms" for kernel in profile["top"][:3])
            lines.append(
                f"| {row['preset']} | {row['model']} | {_update_path(row)} "
                f"| {profile['ms_per_update']:.1f} | {profile['kernels_per_update']:,.0f} "
                f"| {_number(profile['busy'], 'percent')} | {most} |"
            )
    lines += ["", "| engine | engaged | distributed_type | tokens/s (source + target) | peak memory (MiB) |",
              "|---|---|---|---|---|"]
    for row in report["engines"]:
        lines.append(
            f"| {row['engine']} | {'yes' if row['engaged'] else 'no'} | {row['distributed_type']} "
            f"| {_number(row['tokens_per_s'], 'count')} | {_number(row['peak_memory_mib'], 'count')} |"
        )
    recipe = report.get("recipe")
    if recipe is not None:
        lines += ["", "| recipe | BLEU (tokenized, lowercased) | sacreBLEU | training seconds |", "|---|---|---|---|",
                  f"| {recipe['name']} | {_number(recipe['tokenized_bleu'], 'score')} "
                  f"| {_number(recipe['sacrebleu'], 'score')} "
                  f"| {_number(recipe['training_seconds'], 'count')} |"]
    if report.get("generation"):
        lines += ["", "| generation (Multi30k validation, en->de) | precision | beams | captions | seconds "
                  "| captions/s | tokens/s | same tokens as ours (eager) | its time / ours (eager) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for row in report["generation"]:
            same = "—" if row["same_as_vaswani"] is None else f"{row['same_as_vaswani']:,} of {row['captions']:,}"
            ratio = "—" if row["vaswani_speed_ratio"] is None else f"{row['vaswani_speed_ratio']:.2f}"
            seconds = "—" if row["seconds"] is None else f"{row['seconds']:.2f}"
            lines.append(f"| {row['engine']} | {row['precision']} | {row['num_beams']} "
                         f"| {_number(row['captions'], 'count')} | {seconds} "
                         f"| {_number(row['captions_per_s'], 'count')} | {_number(row['tokens_per_s'], 'count')} "
                         f"| {same} | {ratio} |")
    if report.get("projection"):
        lines += ["", "| the paper's run, projected | updates | from the row | tokens/s | hours on 1 GPU "
                  "| hours on 8 GPUs (at most 8x) |", "|---|---|---|---|---|---|"]
        for row in report["projection"]:
            lines.append(f"| {row['preset']} | {_number(row['updates'], 'count')} | {row['update']} "
                         f"| {_number(row['tokens_per_s'], 'count')} | {row['hours_1_gpu']:.1f} "
                         f"| {row['hours_8_gpus']:.1f} |")
    problems = dict(report.get("errors", {}))
    if loss and "error" in loss:
        problems["loss"] = loss["error"]
    problems.update({f"engines: {row['engine']}": row["error"] for row in report["engines"] if row.get("error")})
    problems.update({f"generation: {row['engine']} beam {row['num_beams']}": row["error"]
                     for row in report.get("generation", []) if row.get("error")})
    if problems:
        lines += [""] + [f"- {part}: {message}" for part, message in problems.items()]
    return "\n".join(lines) + "\n"


def _write_report(report: dict, output_dir: Path) -> None:
    write_text_atomically(output_dir / JSON_FILE, json.dumps(report, indent=2) + "\n", "--output_dir")
    write_text_atomically(output_dir / TABLE_FILE, markdown(report), "--output_dir")


# --- the command ----------------------------------------------------------------------------------------------------


def check_installed_package(repo: Path) -> None:
    """Stop when the `vaswani` that Python imports (this module's package) is not the source of the checkout `repo`:
    on the lent machine it is the wheel carried in .whl/, and one built before the last change would measure old
    code."""
    installed = Path(vaswani.__file__).resolve().parent
    if installed == (repo / "modeling").resolve():  # an editable install: the source itself
        return
    sources = {**{path.relative_to(repo / "modeling"): path for path in (repo / "modeling").rglob("*.py")},
               **{Path("pipelines") / path.name: path for path in (repo / "pipelines").glob("*.py")}}
    differing = [str(name) for name, path in sorted(sources.items())
                 if not (installed / name).is_file() or (installed / name).read_bytes() != path.read_bytes()]
    if differing:
        raise ValueError(
            f"the installed package vaswani ({installed}) is not this checkout's source: {', '.join(differing[:5])}"
            f"{' ...' if len(differing) > 5 else ''} differ. Gather the wheels again (python "
            "scripts/tools/gather_gpu_wheels.py) and install them, or install this checkout (pip install -e .)."
        )


def child_environment() -> dict:
    """The environment of every process the suite starts: offline (the lent machine reaches nothing), progress bars
    that write a line every 10 s instead of 10 a second into the log, and torch.compile's recompilations logged with
    their reason (on an H200 inductor compiled the recipe's update again before its tenth; on the CPU, dynamo keeps
    one graph for an epoch of the recipe's batches)."""
    env = dict(os.environ)
    env.setdefault("TORCH_LOGS", "recompiles")
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TQDM_MININTERVAL="10",
               PYTHONUNBUFFERED="1")
    return env


def _run_part(suite: Suite, part: str, report: dict, deadline: float | None) -> None:
    """Run one part within its time limit (and the suite's `deadline`, a `time.perf_counter()` value, or None), put
    its results and error (or none) in the report, and write the report: whatever happens to the parts after it,
    this one's results are on disk. A part with less than MIN_PART_SECONDS of the suite's time left is not run, and
    the report says so."""
    seconds = suite.sizes.seconds[part]
    if part == "recipe" and suite.train_py_compile:
        seconds += suite.sizes.compile_seconds  # inductor compiling the update, once
    if deadline is not None:
        left = deadline - time.perf_counter()
        if left < MIN_PART_SECONDS:
            report["errors"][part] = (f"not run: {max(left, 0):.0f} s of the suite's {suite.sizes.total_seconds} s "
                                      f"were left (it runs alone with --only {part})")
            print(f"  {part}: {report['errors'][part]}", flush=True)
            _write_report(report, suite.output_dir)
            return
        seconds = min(seconds, int(left))
    print(f"{part} (at most {seconds} s) ...", flush=True)
    started = time.perf_counter()
    results, error = RUNNERS[part](suite, seconds)
    report.update(results)
    report["seconds"][part] = round(time.perf_counter() - started, 1)
    if error is None:
        report["errors"].pop(part, None)
    else:
        report["errors"][part] = error
        print(f"  {part}: {error}", flush=True)
    _write_report(report, suite.output_dir)


def _passes_torch_compile(choice: str) -> bool:
    """Whether the recipe's train.py gets --torch_compile: with `yes` only. The recipe trains a 2.35M-parameter model
    for three minutes, and on an H100 inductor compiled its update in 39 s, then again for dynamic
    shapes in 77 s, then a third time: more than the compiled update saves in that time. train.py has compiled one
    graph for every shape since; whether that one compilation pays is for a lent GPU to show (`yes`). The engine
    runs are eager whatever the choice: they show an engine engaging in 8 updates, and FSDP and DeepSpeed do not
    compile (compiled_for_updates)."""
    return choice == "yes"


def run_suite(args, repo: Path) -> dict | None:
    """The suite scripts/tools/gpu_suite.py runs (`args`: its options) from the checkout `repo`: every part, or
    --only one, each within its time limit, into --output_dir; the report. With --worker training, this process
    is the training part's own (it writes its rows to --work_dir) and returns None."""
    sizes = SIZES["dry_run" if args.dry_run else "gpu"]
    if args.seconds is not None:
        if not args.only or args.seconds < 1:
            raise ValueError(f"--seconds {args.seconds}: a part's time limit goes with --only PART and is at least "
                             "1 second")
        sizes = replace(sizes, seconds={**sizes.seconds, args.only: args.seconds})
    if args.worker == "training":
        return _training_worker(sizes, Path(args.work_dir))
    if args.worker == "generation":
        records = Path(args.work_dir) / "generation.jsonl"
        return generation_worker(sizes.generation, Path(args.multi30k_dir) / "validation.jsonl", repo / MODEL,
                                 Path(args.work_dir), lambda row: _write_record(records, row))
    if not args.dry_run and not _on_gpu():
        raise ValueError("no GPU here (torch.cuda.is_available() is false): the suite's sizes need one; --dry_run "
                         "runs the same code with tiny sizes.")
    check_installed_package(repo)
    train_py_compile = _passes_torch_compile(args.train_py_compile)
    output_dir = Path(args.output_dir)
    check_output_dir(output_dir, {})  # not a link, a special file or a training run's folder (vaswani.output_paths)
    output_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="gpu-suite-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    log_path = output_dir / LOG_FILE
    if not args.only:
        log_path.unlink(missing_ok=True)
    suite = Suite(sizes, work_dir.resolve(), output_dir.resolve(), log_path.resolve(), args.dry_run,
                  train_py_compile, Path(args.multi30k_dir).resolve(), child_environment(), repo.resolve())
    report = _starting_report(output_dir / JSON_FILE, args.only, args.dry_run, train_py_compile)
    print(f"{report['device']}; torch {report['torch']}; train.py --torch_compile: {train_py_compile}; "
          f"log: {log_path}", flush=True)
    deadline = None if args.only or sizes.total_seconds is None else time.perf_counter() + sizes.total_seconds
    try:
        for part in [args.only] if args.only else PARTS:
            _run_part(suite, part, report, deadline)
        report["projection"] = projection(report["training"])
        _write_report(report, suite.output_dir)
    finally:
        if not args.work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    print(markdown(report), flush=True)
    return report


__all__ = [
    "MULTI30K_FILES",
    "PARTS",
    "SIZES",
    "check_installed_package",
    "child_environment",
    "error_line",
    "markdown",
    "projection",
    "refused_distributed_type",
    "run_suite",
]
