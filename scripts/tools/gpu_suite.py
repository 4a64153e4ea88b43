"""What issue 40 asks of one GPU, measured by one command in at most 8 minutes: training speed (MFU), the DeepSpeed
and FSDP engines really engaged, and the Multi30k en->de recipe on a clock.

    python scripts/tools/gpu_suite.py --output_dir results/benchmark               # on the GPU
    python scripts/tools/gpu_suite.py --only recipe --output_dir results/benchmark # rerun one part
    python scripts/tools/gpu_suite.py --dry_run --output_dir /tmp/suite            # the same code on the CPU, tiny

Three parts, each in processes of its own with a time limit of its own (SIZES below), so that one that fails or runs
over still leaves the others' results, and its error, in the JSON:

  training  one process (`--worker training`): the base and big presets, bf16, each update one micro-batch of about
            25,000 target tokens (and as many source tokens) through the real training update of scripts/train.py
            (`vaswani.training.loop.run_update`, under an Accelerator with bf16 mixed precision, the optimizer and
            schedule of `vaswani.training.optimization`), eager and `torch.compile`d, beside transformers' Marian of
            the same architecture in the same update (eager). MFU against the bf16 matrix-multiply peak measured
            first in the same process (`vaswani.serving.benchmarking`, shared with scripts/tools/benchmark.py).
  engines   `accelerate launch --config_file scripts/configs/accelerate_{ddp,deepspeed,fsdp}.yaml --num_processes 1
            scripts/train.py` on the synthetic task with the base preset: whether the engine engaged is read from the
            run's own summary.json (`distributed_type`), never assumed; a run that refuses or fails is a row with
            engaged false and its error.
  recipe    scripts/train.py with scripts/configs/multi30k_en_de_gpu.yaml, then scripts/evaluate_model.py on
            test_2016_flickr: tokenized BLEU, sacreBLEU, and train.py's own training time (summary.json's
            train_seconds: updates only, without data preparation, evaluation and saving).

It writes into --output_dir: gpu_suite.json, gpu_suite.md (its tables, for results/benchmark/README.md),
gpu_suite.log (every process's output) and the recipe's recipe_training_summary.json and
recipe_evaluation_results.json. Models and checkpoints go to --work_dir (a temporary folder by default), never to
the output folder: a lent GPU machine sends back only a few files. `--only PART` replaces that part in an existing
gpu_suite.json of the same device and keeps the others.

--dry_run runs every part the same way with tiny sizes (the tiny preset, a few updates, ten sentence pairs for the
recipe): tests/tools/test_gpu_suite.py runs it, so that the command cannot rot between lent GPUs. On a machine
without a GPU, DeepSpeed and FSDP cannot engage (train.py refuses them), which the JSON records as engaged false;
DDP runs on CPU processes (ACCELERATE_USE_CPU=1). What differs on a GPU is in `on_gpu()` and its callers: the
compiler backend (inductor; the CPU dry run only traces, with the `eager` backend), the engine DDP is expected to
be, and peak memory (torch.cuda.max_memory_allocated; none on a CPU).
"""

import argparse
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
from dataclasses import dataclass, fields, replace
from datetime import datetime, timezone
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]
PARTS = ("training", "engines", "recipe")
ENGINES = ("ddp", "deepspeed", "fsdp")
RECIPE_CONFIG = REPO / "scripts" / "configs" / "multi30k_en_de_gpu.yaml"
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
    engine_options: tuple[str, ...]  # train.py options of the engine runs
    recipe_options: tuple[str, ...]  # train.py options on top of the recipe's config
    evaluate_options: tuple[str, ...]  # evaluate_model.py options on top of the recipe's decoding
    seconds: dict  # time limit of each part
    evaluation_seconds: int  # of the recipe's time, kept for scoring the model (the rest is train.py's)


ENGINE_RUN = (
    "--dataset_name", "synthetic", "--max_source_length", "64", "--max_target_length", "64", "--warmup_steps", "10",
    "--logging_steps", "5", "--eval_steps", "100000", "--save_steps", "100000", "--keep_checkpoints", "1",
    "--eval_num_beams", "1", "--eval_max_new_tokens", "16", "--report_to", "none", "--seed", "0",
    "--mixed_precision", "bf16",
)
SIZES = {
    "gpu": Sizes(
        presets=("base", "big"), batch_size=392, length=64, vocab_size=32000,  # 392 x 64 = 25,088 tokens a side
        warmup_updates=3, timed_updates=20, matmul_size=8192, matmul_per_round=10,
        engine_options=ENGINE_RUN + (
            "--preset", "base", "--vocab_size", "8000", "--synthetic_train_size", "8000",
            "--synthetic_validation_size", "32", "--max_eval_samples", "16", "--max_tokens_per_batch", "8192",
            "--tokens_per_update", "16384", "--max_steps", "8",
        ),
        recipe_options=(),
        evaluate_options=(),
        seconds={"training": 130, "engines": 150, "recipe": 250},  # 530 s, and the suite's own start
        evaluation_seconds=45,
    ),
    "dry_run": Sizes(
        presets=("tiny",), batch_size=4, length=8, vocab_size=500,
        warmup_updates=1, timed_updates=2, matmul_size=128, matmul_per_round=1,
        engine_options=ENGINE_RUN + (
            "--preset", "tiny", "--vocab_size", "400", "--synthetic_train_size", "120",
            "--synthetic_validation_size", "8", "--max_eval_samples", "4", "--max_tokens_per_batch", "256",
            "--tokens_per_update", "512", "--max_steps", "2", "--cpu_threads", "1",  # two micro-batches, as on a GPU
        ),
        recipe_options=(
            "--max_steps", "2", "--warmup_steps", "1", "--cooldown_steps", "0", "--max_tokens_per_batch", "128",
            "--tokens_per_update", "128", "--max_eval_samples", "4", "--eval_num_beams", "1",
            "--eval_max_new_tokens", "8", "--cpu_threads", "1",
        ),
        evaluate_options=("--max_new_tokens", "8", "--num_beams", "1"),
        seconds={"training": 240, "engines": 300, "recipe": 240},
        evaluation_seconds=120,
    ),
}


def on_gpu() -> bool:
    return torch.cuda.is_available()


# --- the training part (its own process) ---------------------------------------------------------------------------


def training_worker(sizes: Sizes, work_dir: Path) -> None:
    """Measure the training rows, each written to work_dir/training.jsonl as soon as it is measured (the part's time
    limit may stop this process before the last); a row that fails is written as its error and the next one runs."""
    from accelerate import Accelerator

    from vaswani.serving.benchmarking import Setup, matmul_peak

    device = "cuda" if on_gpu() else "cpu"
    out = work_dir / "training.jsonl"
    accelerator = Accelerator(mixed_precision="bf16", step_scheduler_with_optimizer=False)  # as train.py's
    probe = Setup(sizes.presets[0], "bf16", 1, 1, 1, sizes.vocab_size, device)
    peak = matmul_peak(probe, torch.bfloat16, size=sizes.matmul_size, per_round=sizes.matmul_per_round)
    write_record(out, {"record": "peak", "bf16_flops": peak})
    print(f"bf16 matrix-multiply peak: {peak / 1e12:.1f} TFLOP/s", flush=True)
    plan = [(preset, False, model) for preset in sizes.presets for model in ("vaswani", "marian")]
    plan += [(preset, True, "vaswani") for preset in sizes.presets]
    for preset, compiled, model_name in plan:
        setup = Setup(preset, "bf16", sizes.batch_size, sizes.length, sizes.length, sizes.vocab_size, device)
        name = f"{preset} {model_name}{' compiled' if compiled else ''}"
        try:
            row = measure_training(accelerator, setup, model_name, compiled, sizes, peak, work_dir)
        except Exception as error:  # noqa: BLE001 - a row that fails (out of memory, a compiler error) is reported
            write_record(out, {"record": "error", "row": name, "error": f"{type(error).__name__}: {error}"})
            print(f"{name}: {type(error).__name__}: {error}", flush=True)
        else:
            write_record(out, {"record": "row", **row})
            print(f"{name}: {row['tokens_per_s']:,.0f} tokens/s, MFU {row['mfu']:.1%}", flush=True)
        finally:
            release(accelerator)


def measure_training(accelerator, setup, model_name: str, compiled: bool, sizes: Sizes, peak: float,
                     work_dir: Path) -> dict:
    """One training row: seconds per update of `sizes.timed_updates` updates after the warm-up ones, each update
    the real one of scripts/train.py on one micro-batch of random tokens."""
    from torch._dynamo.utils import counters

    from vaswani import VaswaniConfig
    from vaswani.serving.benchmarking import make_batch, marian_model, synchronize, training_flops, vaswani_model
    from vaswani.training.arguments import TrainArguments
    from vaswani.training.loop import TrainingProgress, run_update
    from vaswani.training.optimization import build_optimizer_and_schedule, paper_peak_learning_rate

    torch.manual_seed(0)
    model = vaswani_model(setup) if model_name == "vaswani" else marian_model(setup)
    args = TrainArguments(output_dir=str(work_dir / "training"), mixed_precision="bf16")
    optimizer, schedule = build_optimizer_and_schedule(
        model, paper_peak_learning_rate(model.config.d_model, args.warmup_steps), args.warmup_steps,
        (args.adam_beta1, args.adam_beta2), args.adam_epsilon, args.weight_decay, max_steps=args.max_steps,
    )
    accelerator.gradient_accumulation_steps = 1
    model, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
    if compiled:
        model = torch.compile(model, backend="inductor" if on_gpu() else "eager")
    micro_batches = [make_batch(replace(setup, device="cpu"))]  # on the host, as collate gives them
    progress = TrainingProgress()
    for _ in range(sizes.warmup_updates):
        run_update(accelerator, model, optimizer, schedule, micro_batches, args, progress)
    synchronize(setup)
    if on_gpu():
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    tokens = 0
    for _ in range(sizes.timed_updates):
        tokens += run_update(accelerator, model, optimizer, schedule, micro_batches, args, progress)[1]
    synchronize(setup)
    seconds = (time.perf_counter() - started) / sizes.timed_updates
    config = VaswaniConfig.from_preset(setup.preset, vocab_size=setup.vocab_size)  # Marian's too: the same shapes
    return {
        "preset": setup.preset,
        "model": model_name,
        "precision": setup.precision,
        "compiled": compiled,
        "tokens_per_update": setup.batch_size * setup.target_length,  # target tokens, as --tokens_per_update counts
        "tokens_per_s": tokens / sizes.timed_updates / seconds,  # source + target, as train.py reports
        "mfu": training_flops(config, setup) / seconds / peak,
        "peak_memory_mib": torch.cuda.max_memory_allocated() / 2**20 if on_gpu() else None,
        "graph_breaks": sum(counters["graph_break"].values()) if compiled else None,
    }


def release(accelerator) -> None:
    """Forget the row's model, optimizer and compiled graphs before the next row."""
    import torch._dynamo
    from torch._dynamo.utils import counters

    accelerator.free_memory()
    torch._dynamo.reset()
    counters.clear()
    gc.collect()
    if on_gpu():
        torch.cuda.empty_cache()


def write_record(path: Path, record: dict) -> None:
    with path.open("a", encoding="utf-8") as file:
        file.write(json.dumps(record) + "\n")


def read_records(path: Path) -> list[dict]:
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
    train_py_compile: bool  # pass --torch_compile to the runs of train.py
    multi30k_dir: Path
    env: dict


@dataclass
class Finished:
    status: int | None  # None: stopped at its time limit
    output: str
    seconds: float


def run_logged(suite: Suite, command: list[str], seconds: float, env: dict | None = None) -> Finished:
    """Run `command` from the repository in a process group of its own, its output appended to the log; after
    `seconds` stop the whole group (accelerate launch starts the training process under torchrun)."""
    command = [str(part) for part in command]
    with suite.log_path.open("a", encoding="utf-8") as log:
        log.write(f"\n$ {shlex.join(command)}\n")
        log.flush()
        start_offset = log.tell()
        started = time.perf_counter()
        process = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                   env=env or suite.env, start_new_session=True)
        try:
            status = process.wait(timeout=max(seconds, 1))
        except subprocess.TimeoutExpired:
            stop_group(process)
            status = None
    with suite.log_path.open("rb") as log:
        log.seek(start_offset)
        output = log.read().decode("utf-8", errors="replace")
    return Finished(status, output, time.perf_counter() - started)


def stop_group(process: subprocess.Popen) -> None:
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


def failure(finished: Finished, seconds: float) -> str | None:
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


def run_training(suite: Suite, seconds: float) -> tuple[dict, str | None]:
    records_file = suite.work_dir / "training.jsonl"
    records_file.unlink(missing_ok=True)
    command = [sys.executable, Path(__file__).resolve(), "--worker", "training", "--work_dir", suite.work_dir]
    finished = run_logged(suite, command + (["--dry_run"] if suite.dry_run else []), seconds)
    records = read_records(records_file)
    peak = next((record["bf16_flops"] for record in records if record["record"] == "peak"), None)
    rows = [{k: v for k, v in record.items() if k != "record"} for record in records if record["record"] == "row"]
    errors = [f"{record['row']}: {record['error']}" for record in records if record["record"] == "error"]
    if (problem := failure(finished, seconds)) is not None:
        errors.append(problem)
    return {"peak_flops_bf16": peak, "training": rows}, "; ".join(errors) or None


def run_engines(suite: Suite, seconds: float) -> tuple[dict, str | None]:
    """One run of train.py under each engine's Accelerate config, one process; each gets an equal share of what is
    left of the part's time."""
    deadline = time.perf_counter() + seconds
    env = dict(suite.env)
    if not on_gpu():
        env["ACCELERATE_USE_CPU"] = "1"  # DDP on CPU processes; DeepSpeed and FSDP still ask for GPUs
    rows = []
    for left, engine in zip(range(len(ENGINES), 0, -1), ENGINES):
        share = (deadline - time.perf_counter()) / left
        output_dir = suite.work_dir / f"engine_{engine}"
        shutil.rmtree(output_dir, ignore_errors=True)
        command = [
            sys.executable, "-m", "accelerate.commands.launch",
            "--config_file", REPO / "scripts" / "configs" / f"accelerate_{engine}.yaml", "--num_processes", "1",
            REPO / "scripts" / "train.py", *suite.sizes.engine_options, *compile_option(suite),
            "--output_dir", output_dir,
        ]
        finished = run_logged(suite, command, share, env)
        rows.append(engine_row(engine, finished, share, output_dir))
        print(f"  {engine}: engaged {rows[-1]['engaged']} ({rows[-1]['distributed_type']})", flush=True)
    return {"engines": rows}, None


def expected_distributed_type(engine: str) -> str:
    """What Accelerate reports when the engine is engaged (accelerate.utils.DistributedType's values)."""
    return {"ddp": "MULTI_GPU" if on_gpu() else "MULTI_CPU", "deepspeed": "DEEPSPEED", "fsdp": "FSDP"}[engine]


def engine_row(engine: str, finished: Finished, seconds: float, output_dir: Path) -> dict:
    """The run's own account: its summary.json when it finished; else what its error says Accelerate set up."""
    summary = read_json(output_dir / "summary.json") if finished.status == 0 else None
    if summary is not None:
        distributed_type = summary.get("distributed_type", "unknown")
        logged = [record for record in read_records(output_dir / "metrics.jsonl") if "tokens_per_second" in record]
        # the last logging window: steady updates, without the first one's set-up (and compilation)
        tokens_per_s = logged[-1]["tokens_per_second"] if logged else summary["tokens_per_second"]
        peak_memory = summary.get("peak_memory_mib")
    else:
        distributed_type, tokens_per_s, peak_memory = refused_distributed_type(finished.output), None, None
    return {
        "engine": engine,
        "engaged": summary is not None and distributed_type == expected_distributed_type(engine),
        "distributed_type": distributed_type,
        "tokens_per_s": tokens_per_s,
        "peak_memory_mib": peak_memory,
        "seconds": round(finished.seconds, 1),
        "error": failure(finished, seconds) if summary is None else None,
    }


def refused_distributed_type(output: str) -> str:
    """What Accelerate set up in a run that train.py stopped because the config's engine could not engage
    (vaswani.training.loop.check_engine says "... but Accelerate set up MULTI_CPU on cpu ..."); "none" when the run
    stopped before (DeepSpeed not installed, a crash)."""
    marker = "but Accelerate set up "
    for line in reversed(output.splitlines()):
        if marker in line:
            return line.split(marker, 1)[1].split()[0]
    return "none"


def run_recipe(suite: Suite, seconds: float) -> tuple[dict, str | None]:
    """Train the GPU recipe, then score its last model on test_2016_flickr with the recipe's decoding."""
    deadline = time.perf_counter() + seconds
    recipe = {"name": RECIPE_CONFIG.stem, "bleu": None, "sacrebleu": None, "training_seconds": None, "steps": None,
              "tokens_per_s": None}
    missing = [name for name in MULTI30K_FILES if not (suite.multi30k_dir / name).is_file()]
    if missing:
        return {"recipe": recipe}, (f"--multi30k_dir {suite.multi30k_dir} lacks {', '.join(missing)}: name the "
                                    "folder of the Multi30k JSON Lines files")
    output_dir = suite.work_dir / "recipe"
    shutil.rmtree(output_dir, ignore_errors=True)
    train = [
        sys.executable, REPO / "scripts" / "train.py", "--config", RECIPE_CONFIG,
        "--train_file", suite.multi30k_dir / "train.jsonl",
        "--validation_file", suite.multi30k_dir / "validation.jsonl",
        *suite.sizes.recipe_options, *compile_option(suite), "--output_dir", output_dir,
    ]
    limit = seconds - suite.sizes.evaluation_seconds
    if (problem := failure(run_logged(suite, train, limit), limit)) is not None:
        return {"recipe": recipe}, f"train.py: {problem}"
    summary = read_json(output_dir / "summary.json")
    recipe.update(training_seconds=summary["train_seconds"], steps=summary["steps"],
                  tokens_per_s=summary["tokens_per_second"])
    shutil.copy(output_dir / "summary.json", suite.output_dir / "recipe_training_summary.json")
    results_file = output_dir / "evaluation_results.json"
    evaluate = [
        sys.executable, REPO / "scripts" / "evaluate_model.py", "--model", output_dir / "last", "--task", "translation",
        "--test_file", suite.multi30k_dir / "test_2016_flickr.jsonl", "--dataset_label", "bentrevett/multi30k",
        "--split", "test_2016_flickr", "--source_column", "en", "--target_column", "de", "--num_beams", "5",
        "--length_penalty", "1.0", "--max_new_tokens", "80", "--batch_size", "100", "--diagnostic_examples", "0",
        *suite.sizes.evaluate_options, "--output_file", results_file,
    ]
    limit = deadline - time.perf_counter()
    if (problem := failure(run_logged(suite, evaluate, limit), limit)) is not None:
        return {"recipe": recipe}, f"evaluate_model.py: {problem}"
    shutil.copy(results_file, suite.output_dir / "recipe_evaluation_results.json")
    scores = {metric["type"]: metric["value"] for metric in read_json(results_file)["metrics"]}
    recipe.update(bleu=scores.get("bleu"), sacrebleu=scores.get("sacrebleu"))
    return {"recipe": recipe}, None


def read_json(path: Path) -> dict | None:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def compile_option(suite: Suite) -> list[str]:
    return ["--torch_compile"] if suite.train_py_compile else []


def train_py_has_torch_compile() -> bool:
    """Whether scripts/train.py takes --torch_compile (TrainArguments has the field): the suite passes it where it
    exists, and runs without it where it does not yet."""
    from vaswani.training.arguments import TrainArguments

    return "torch_compile" in {option.name for option in fields(TrainArguments)}


RUNNERS = {"training": run_training, "engines": run_engines, "recipe": run_recipe}


# --- the report -----------------------------------------------------------------------------------------------------


def device_name() -> str:
    from vaswani.serving.benchmarking import cpu_name

    return torch.cuda.get_device_name() if on_gpu() else cpu_name()


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def new_report(dry_run: bool, train_py_compile: bool) -> dict:
    return {
        "device": device_name(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "torch": torch.__version__,
        "packages": {name: installed_version(name) for name in PACKAGES},  # what the carried wheels gave
        "dry_run": dry_run,
        "train_py_torch_compile": train_py_compile,
        "peak_flops_bf16": None,
        "training": [],
        "engines": [],
        "recipe": None,
        "seconds": {},
        "errors": {},
    }


def starting_report(json_path: Path, only: str | None, dry_run: bool, train_py_compile: bool) -> dict:
    """A new report; with --only, the existing one of the same device, whose other parts stay."""
    report = new_report(dry_run, train_py_compile)
    existing = read_json(json_path) if only else None
    if existing is not None and existing.get("device") == report["device"]:
        for key in ("date", "torch", "packages", "dry_run", "train_py_torch_compile"):
            existing[key] = report[key]
        existing.setdefault("errors", {}).pop(only, None)
        return existing
    return report


def number(value, style: str) -> str:
    if value is None:
        return "—"
    return {"count": f"{value:,.0f}", "percent": f"{value:.1%}", "score": f"{value:.2f}"}[style]


def markdown(report: dict) -> str:
    """The tables of results/benchmark/README.md."""
    peak = report.get("peak_flops_bf16")
    lines = [
        f"{report['device']}, torch {report['torch']}, {report['date']}"
        + (f"; bf16 matrix-multiply peak {peak / 1e12:,.1f} TFLOP/s (measured in the run)" if peak else "")
        + (" (dry run: tiny sizes)" if report.get("dry_run") else ""),
        "",
        "| preset | model | precision | compiled | target tokens / update | tokens/s (source + target) | MFU "
        "| peak memory (MiB) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in report["training"]:
        lines.append(
            f"| {row['preset']} | {row['model']} | {row['precision']} | {'yes' if row['compiled'] else 'no'} "
            f"| {number(row['tokens_per_update'], 'count')} | {number(row['tokens_per_s'], 'count')} "
            f"| {number(row['mfu'], 'percent')} | {number(row['peak_memory_mib'], 'count')} |"
        )
    lines += ["", "| engine | engaged | distributed_type | tokens/s (source + target) | peak memory (MiB) |",
              "|---|---|---|---|---|"]
    for row in report["engines"]:
        lines.append(
            f"| {row['engine']} | {'yes' if row['engaged'] else 'no'} | {row['distributed_type']} "
            f"| {number(row['tokens_per_s'], 'count')} | {number(row['peak_memory_mib'], 'count')} |"
        )
    recipe = report.get("recipe")
    if recipe is not None:
        lines += ["", "| recipe | BLEU (tokenized, lowercased) | sacreBLEU | training seconds |", "|---|---|---|---|",
                  f"| {recipe['name']} | {number(recipe['bleu'], 'score')} | {number(recipe['sacrebleu'], 'score')} "
                  f"| {number(recipe['training_seconds'], 'count')} |"]
    problems = dict(report.get("errors", {}))
    problems.update({f"engines: {row['engine']}": row["error"] for row in report["engines"] if row.get("error")})
    if problems:
        lines += [""] + [f"- {part}: {message}" for part, message in problems.items()]
    return "\n".join(lines) + "\n"


def write_report(report: dict, output_dir: Path) -> None:
    (output_dir / JSON_FILE).write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    (output_dir / TABLE_FILE).write_text(markdown(report), encoding="utf-8")


# --- the command ----------------------------------------------------------------------------------------------------


def check_installed_package() -> None:
    """Stop when the `vaswani` that Python imports is not this checkout's source: on the lent machine it is the
    wheel carried in .whl/, and one built before the last change would measure old code."""
    import vaswani

    installed = Path(vaswani.__file__).resolve().parent
    if installed == REPO / "modeling":  # an editable install: the source itself
        return
    sources = {**{path.relative_to(REPO / "modeling"): path for path in (REPO / "modeling").rglob("*.py")},
               **{Path("pipelines") / path.name: path for path in (REPO / "pipelines").glob("*.py")}}
    differing = [str(name) for name, path in sorted(sources.items())
                 if not (installed / name).is_file() or (installed / name).read_bytes() != path.read_bytes()]
    if differing:
        raise ValueError(
            f"the installed package vaswani ({installed}) is not this checkout's source: {', '.join(differing[:5])}"
            f"{' ...' if len(differing) > 5 else ''} differ. Gather the wheels again (python "
            "scripts/tools/gather_gpu_wheels.py) and install them, or install this checkout (pip install -e .)."
        )


def child_environment() -> dict:
    """The environment of every process the suite starts: offline (the lent machine reaches nothing), and progress
    bars that write a line every 10 s instead of 10 a second into the log."""
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TQDM_MININTERVAL="10",
               PYTHONUNBUFFERED="1")
    return env


def parse_arguments(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=str(REPO / "results" / "benchmark"),
                        help="where gpu_suite.json, gpu_suite.md, gpu_suite.log and the recipe's files go")
    parser.add_argument("--only", choices=PARTS, help="run this part only; the others stay as they are in the JSON")
    parser.add_argument("--dry_run", action="store_true", help="every part with tiny sizes (on a CPU: seconds)")
    parser.add_argument("--multi30k_dir", default=str(REPO.parent / "shared" / "data" / "multi30k"),
                        help="the folder of train.jsonl, validation.jsonl and test_2016_flickr.jsonl (on the lent "
                        "machine: .data/multi30k, which scripts/tools/gather_gpu_wheels.py fills)")
    parser.add_argument("--work_dir", help="where the runs write their models and checkpoints (default: a "
                        "temporary folder, removed at the end)")
    parser.add_argument("--train_py_compile", choices=["auto", "yes", "no"], default="auto",
                        help="pass --torch_compile to train.py; auto: on a GPU, where train.py has the option")
    parser.add_argument("--worker", choices=["training"], help=argparse.SUPPRESS)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_arguments(argv)
    sizes = SIZES["dry_run" if args.dry_run else "gpu"]
    if args.worker == "training":
        return training_worker(sizes, Path(args.work_dir))
    if not args.dry_run and not on_gpu():
        raise ValueError("no GPU here (torch.cuda.is_available() is false): the suite's sizes need one; --dry_run "
                         "runs the same code with tiny sizes.")
    check_installed_package()
    train_py_compile = passes_torch_compile(args.train_py_compile)
    output_dir = Path(args.output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    work_dir = Path(args.work_dir) if args.work_dir else Path(tempfile.mkdtemp(prefix="gpu-suite-"))
    work_dir.mkdir(parents=True, exist_ok=True)
    log_path = output_dir / LOG_FILE
    if not args.only:
        log_path.unlink(missing_ok=True)
    suite = Suite(sizes, work_dir.resolve(), output_dir.resolve(), log_path.resolve(), args.dry_run,
                  train_py_compile, Path(args.multi30k_dir).resolve(), child_environment())
    report = starting_report(output_dir / JSON_FILE, args.only, args.dry_run, train_py_compile)
    print(f"{report['device']}; torch {report['torch']}; train.py --torch_compile: {train_py_compile}; "
          f"log: {log_path}", flush=True)
    try:
        for part in [args.only] if args.only else PARTS:
            run_part(suite, part, report)
    finally:
        if not args.work_dir:
            shutil.rmtree(work_dir, ignore_errors=True)
    print(markdown(report), flush=True)
    return report


def run_part(suite: Suite, part: str, report: dict) -> None:
    """Run one part within its time limit, put its results and error (or none) in the report, and write the report:
    whatever happens to the parts after it, this one's results are on disk."""
    seconds = suite.sizes.seconds[part]
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
    write_report(report, suite.output_dir)


def passes_torch_compile(choice: str) -> bool:
    """Whether the runs of train.py get --torch_compile: never where train.py lacks the option; with `yes`; with
    `auto` on a GPU (on a CPU, compiling would take the dry run minutes)."""
    has_option = train_py_has_torch_compile()
    if choice == "yes" and not has_option:
        raise ValueError("--train_py_compile yes: scripts/train.py has no --torch_compile option yet; use auto or no.")
    return has_option and (choice == "yes" or (choice == "auto" and on_gpu()))


if __name__ == "__main__":
    from vaswani.cli import run_command

    run_command(main)
