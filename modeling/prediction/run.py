"""A corpus in, its outputs out (scripts/predict.py, `vaswani-predict`): any model of this project run over a
file of any size, one output line per input line, in input order.

    vaswani-predict --model results/multi30k_en_de/model --input_file news.en --output_file news.de
    cat news.en | vaswani-predict --model results/multi30k_en_de/model --input_file - --output_file - > news.de
    accelerate launch scripts/predict.py --model M --input_file big.en --output_file big.de   # several processes

How it goes: the examples are read a window at a time (`--read_batch_size`), each window sorted by length and cut
into batches (`--batch_size`, `--max_tokens_per_batch`: vaswani.prediction.batches), the batches decoded by workers
side by side on a CPU (vaswani.prediction.workers; one per core by default) or on the process's GPU, and the window's
outputs written in input order (vaswani.prediction.progress: recorded per window, published whole at the end,
continued after any kill). Under `accelerate launch`, process r of n decodes windows r, r + n, r + 2n, ...: the output
is the same bytes as one process writes. Memory holds two windows at most, whatever the corpus's size.

What each task writes is vaswani.prediction.tasks'; what is read and how a bad line is reported,
vaswani.prediction.sources'. Decoding settings not given come from the model's generation config, as in the
pipelines. Everything is checked before any work: the options, the input (a regular file, not binary, the column
there), the output (vaswani.output_paths: never an input, never a link or a special file, an existing file only with
--overwrite_output_file), the model (this project's, its task's head trained).
"""

import json
import os
import sys
import time
from collections import deque
from concurrent.futures.process import BrokenProcessPool
from contextlib import contextmanager
from pathlib import Path

import torch
from transformers import AutoTokenizer, HfArgumentParser

from .. import pipelines as vaswani_pipelines
from ..cli import require_folder_or_hub_id, run_command
from ..output_paths import check_output_file
from ..runs.ownership import release_output_dir, take_output_dir
from ..runs.preemption import RESUMABLE, StopSignals, StoppedBySignal
from ..safe_loading import require_trained_head
from ..tasks import auto_class_of, read_task
from .arguments import GENERATION_TASKS, PredictionArguments, check_arguments
from .batches import in_input_order, plan_batches, windows
from .progress import WorkFolder
from .sources import file_identity, open_source
from .tasks import Predictor
from .workers import Workers, usable_cores


DECODING_OPTIONS = ("num_beams", "max_new_tokens", "min_new_tokens", "length_penalty", "no_repeat_ngram_size",
                    "early_stopping")
PENDING_WINDOWS = 2  # windows in flight: the next is batched while the last one's batches finish
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def main(argv: list[str] | None = None) -> dict:
    (args,) = HfArgumentParser(PredictionArguments).parse_args_into_dataclasses(args=argv)
    return predict(args)


def predict(args: PredictionArguments) -> dict:
    """Run `args.model` over the corpus; returns what was done (lines, seconds, truncated inputs, ...)."""
    from accelerate import PartialState
    from accelerate.utils import parse_flag_from_env

    check_arguments(args)
    # this process tokenizes each window to sort it, then forks the workers: the tokenizers library's own thread pool
    # would take cores from them, and cannot be forked
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    state = PartialState(cpu=parse_flag_from_env("ACCELERATE_USE_CPU"))
    rank, world = state.process_index, state.num_processes
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != world:
        raise ValueError(
            f"Launched as {launched} processes (WORLD_SIZE={launched}), but Accelerate sees {world}: each would decode "
            "the whole corpus into the same file. On a machine without GPUs set ACCELERATE_USE_CPU=1 "
            "(`ACCELERATE_USE_CPU=1 accelerate launch --multi_gpu --num_processes N scripts/predict.py ...`)."
        )
    to_stdout = args.output_file == "-"
    if world > 1 and (to_stdout or args.input_file == "-"):
        raise ValueError("Standard input and output are one process's: with several processes, give --input_file and "
                         "--output_file files.")
    folder = _model_folder(args.model)
    task = args.task or read_task(folder)
    if args.task is not None:
        read_task(folder)  # this project's model, before anything is parsed
    output_format = _output_format(args, task)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    column = args.text_column or _default_column(task, config)
    source = open_source(args.input_file, args.input_format, column, args.errors, args.dataset_name,
                         args.dataset_config_name, args.split)
    output = None if to_stdout else Path(args.output_file)
    if output is not None:
        inputs = {"--model": folder, "--input_file": source.file}
        # an existing output is replaced only when asked, or where an earlier run of this command published it
        published = WorkFolder.published_here(output)
        check_output_file(output, inputs, "--output_file",
                          replaces=lambda path: args.overwrite_output_file or published)
    source.check_first_example()

    with _quiet_loading(args.quiet):
        predictor = _predictor(args, folder, task, output_format, state.device)
    settings = _settings(args, folder, task, output_format, column, source, predictor)

    lock = work = None
    started = time.perf_counter()
    try:
        if output is not None:
            work = WorkFolder(output, settings)
            if state.is_main_process:
                output.parent.mkdir(parents=True, exist_ok=True)
                lock, _ = take_output_dir(output, lock_file=output.with_name(f".{output.name}.lock"),
                                          option="--output_file")
                opened = work.open(args.overwrite_output_file)
                if opened == "published":
                    _say(args, f"{output} is complete: an earlier run of this command finished it.")
            state.wait_for_everyone()
            if not work.path.is_dir():  # published
                return {"lines": 0, "seconds": 0.0, "output_file": str(output), "resumed": False}
        stats = _run(args, predictor, source, work, rank, world, state)
        state.wait_for_everyone()
        if work is not None and state.is_main_process:
            stats.update(_totals(work, stats["windows"]))
            work.publish(stats["windows"])
    finally:
        if lock is not None:
            release_output_dir(lock, remove=output.with_name(f".{output.name}.lock"))
    stats["seconds"] = time.perf_counter() - started
    stats["output_file"] = args.output_file
    if state.is_main_process:
        _say(args, _summary(stats, predictor, args))
    return stats


# --- the work ----------------------------------------------------------------------------------------------------


def _run(args, predictor: Predictor, source, work: WorkFolder | None, rank: int, world: int, state) -> dict:
    """Decode this process's windows; returns the counts of this process and the number of windows of the corpus."""
    done = work.done() if work is not None else set()
    count, threads = _workers(args, state)
    # the first process's bar: with several processes it counts its own windows, of a total it cannot know cheaply
    total = source.count() if state.is_main_process and not args.quiet and world == 1 else None
    bar = _progress_bar(args, total, state.is_main_process)
    counts = {"lines": 0, "truncated": 0, "windows": 0, "resumed_windows": len(done)}
    pending = deque()
    limit = predictor.max_source_tokens
    with Workers(predictor.predict, count, threads) as workers, StopSignals() as stop:
        index = -1
        for index, texts in enumerate(windows(source.examples(), args.read_batch_size)):
            if index % world != rank or index in done:
                if bar is not None and index in done and world == 1:
                    bar.update(len(texts))
                continue
            lengths = predictor.lengths(texts)
            truncated = [position for position, length in enumerate(lengths) if length > limit]
            if truncated and args.strict:
                number = index * args.read_batch_size + truncated[0] + 1
                raise ValueError(f"{source.name}, {_example(source, number)}: {lengths[truncated[0]]} tokens, longer "
                                 f"than the {limit} this model reads (--strict). Shorten it, or leave out --strict "
                                 "to truncate such inputs (they are counted).")
            batches = plan_batches(lengths, args.batch_size, args.max_tokens_per_batch)
            futures = [workers.submit([texts[position] for position in batch]) for batch in batches]
            pending.append((index, len(texts), len(truncated), batches, futures))
            while len(pending) >= PENDING_WINDOWS or (pending and all(f.done() for f in pending[0][4])):
                _finish(pending.popleft(), work, counts, bar)
                _stop_if_asked(stop, workers, work, counts)
        while pending:
            _finish(pending.popleft(), work, counts, bar)
            _stop_if_asked(stop, workers, work, counts, last=not pending)
        counts["windows"] = index + 1
    if bar is not None:
        bar.close()
    counts["replaced"] = source.counts.replaced
    return counts


def _finish(window, work: WorkFolder | None, counts: dict, bar) -> None:
    index, size, truncated, batches, futures = window
    try:
        outputs = [future.result() for future in futures]
    except BrokenProcessPool:
        raise OSError(
            "a worker process died (killed by the system: out of memory?). The windows done are kept: run the same "
            "command again to continue, with fewer --workers or a smaller --batch_size / --max_tokens_per_batch if "
            "memory is short (other settings start over)."
        ) from None
    lines = in_input_order(batches, outputs, size)
    if work is None:
        sys.stdout.write("".join(line + "\n" for line in lines))
        sys.stdout.flush()
    else:
        work.write_window(index, lines, {"lines": size, "truncated": truncated})
    counts["lines"] += size
    counts["truncated"] += truncated
    if bar is not None:
        bar.update(size)


def _stop_if_asked(stop: StopSignals, workers: Workers, work: WorkFolder | None, counts: dict,
                   last: bool = False) -> None:
    if stop.received is None or last:
        return
    workers.close(cancel=True)
    if work is None:
        raise StoppedBySignal(f"stopped by {stop.received.name} after {counts['lines']:,} lines (standard output: "
                              "not resumable).")
    raise StoppedBySignal(f"stopped by {stop.received.name} with {counts['lines']:,} lines done and recorded in "
                          f"{work.path}; the same command continues from there ({RESUMABLE}).")


def _totals(work: WorkFolder, windows_count: int) -> dict:
    """The counts of every process's windows (the first process reports them)."""
    lines = truncated = 0
    for index in range(windows_count):
        record = work.window_record(index)
        lines += record["lines"]
        truncated += record["truncated"]
    return {"lines_in_output": lines, "truncated": truncated}


# --- set-up ------------------------------------------------------------------------------------------------------


def _model_folder(model: str) -> Path:
    """The model's folder: as given, or a Hub repository's snapshot (downloaded, or from the cache offline)."""
    require_folder_or_hub_id(model, "--model")
    if os.path.isdir(model):
        return Path(model)
    from huggingface_hub import snapshot_download

    return Path(snapshot_download(model))


def _output_format(args: PredictionArguments, task: str) -> str:
    output_format = args.output_format or ("jsonl" if task == "token-classification" else "text")
    if task == "token-classification" and output_format != "jsonl":
        raise ValueError("--output_format text: a tagger writes its entities as JSON Lines (--output_format jsonl).")
    if args.num_return_sequences > 1 and (output_format != "jsonl" or task not in GENERATION_TASKS):
        raise ValueError(f"--num_return_sequences {args.num_return_sequences}: several outputs per input are written "
                         "as JSON Lines (--output_format jsonl), by translation and summarization.")
    given = [name for name in DECODING_OPTIONS if getattr(args, name) is not None]
    if given and task not in GENERATION_TASKS:
        raise ValueError(f"--{given[0]}: decoding settings are for translation and summarization; --task is {task}.")
    return output_format


def _default_column(task: str, config: dict) -> str:
    if task == "translation":
        return config.get("source_lang") or "text"
    return "document" if task == "summarization" else "text"


def _predictor(args: PredictionArguments, folder: Path, task: str, output_format: str, device) -> Predictor:
    """The model (refused if its task's head is untrained) with the package's pipeline for the task."""
    if device.type == "cpu" and args.dtype != "float32":
        raise ValueError(f"--dtype {args.dtype}: on a CPU the model runs in float32 (its CPU decoder's precision).")
    model = require_trained_head(auto_class_of(task), str(folder), task)
    model.eval()
    if device.type != "cpu":
        model.to(device, DTYPES[args.dtype])
    tokenizer = AutoTokenizer.from_pretrained(folder)
    options = {name: getattr(args, name) for name in DECODING_OPTIONS if getattr(args, name) is not None}
    if task in GENERATION_TASKS:
        if args.num_return_sequences > 1:
            options["num_return_sequences"] = args.num_return_sequences
            beams = options.get("num_beams", model.generation_config.num_beams or 1)
            if args.num_return_sequences > beams:
                raise ValueError(f"--num_return_sequences {args.num_return_sequences} needs as many beams; the "
                                 f"search has {beams} (--num_beams).")
        built = {}
    else:
        built = {"aggregation_strategy": args.aggregation_strategy} if task == "token-classification" else {}
        options = dict(built)
    pipeline = vaswani_pipelines.pipeline(task, model=model, tokenizer=tokenizer, device=device, **built)
    if task in GENERATION_TASKS:
        pipeline._sanitize_parameters(**options)  # the settings checked against the model before any work
    return Predictor(pipeline, task, output_format, options)


def _workers(args: PredictionArguments, state) -> tuple[int, int]:
    """(workers, threads each): on a CPU, one worker per core of this process's share by default."""
    if state.device.type != "cpu":
        if args.workers not in (None, 1):
            raise ValueError(f"--workers {args.workers}: on a {state.device.type} device each process decodes its "
                             "batches alone; launch more processes with `accelerate launch` instead.")
        return 1, 1
    cores = max(1, usable_cores() // max(1, state.num_processes if _on_one_machine(state) else 1))
    count = args.workers or cores
    return count, max(1, cores // count)


def _on_one_machine(state) -> bool:
    return int(os.environ.get("LOCAL_WORLD_SIZE", state.num_processes)) == state.num_processes


def _settings(args, folder: Path, task: str, output_format: str, column, source, predictor: Predictor) -> dict:
    """What decides the output's bytes (a resumed run must have the same)."""
    weights = sorted(folder.glob("*.safetensors"))
    input_identity = (file_identity(source.file) if source.file is not None else
                      {"dataset": args.dataset_name, "config": args.dataset_config_name, "split": args.split,
                       "fingerprint": getattr(source.dataset, "_fingerprint", None)}
                      if args.dataset_name else {"stdin": True})
    settings = {
        "model": str(folder.resolve()),
        "weights": [file_identity(path) for path in weights],
        "task": task,
        "input": input_identity,
        "input_format": source.kind,
        "text_column": column,
        "errors": args.errors,
        "strict": args.strict,
        "output_format": output_format,
        "read_batch_size": args.read_batch_size,
        "batch_size": args.batch_size,
        "max_tokens_per_batch": args.max_tokens_per_batch,
        "options": predictor.options,
        "dtype": args.dtype,
        "device": predictor.pipeline.model.device.type,
    }
    return json.loads(json.dumps(settings))


def _progress_bar(args, total: int | None, main_process: bool):
    if args.quiet or not main_process:
        return None
    from tqdm.auto import tqdm

    # shown after a second's work: a command that stops at once on a bad line prints that line alone
    return tqdm(total=total, unit=" lines", file=sys.stderr, dynamic_ncols=True, mininterval=1.0, smoothing=0.1,
                delay=1.0)


@contextmanager
def _quiet_loading(quiet: bool):
    """transformers' "Loading weights" bar off with --quiet."""
    from transformers.utils import logging

    shown = logging.is_progress_bar_enabled()
    if quiet:
        logging.disable_progress_bar()
    try:
        yield
    finally:
        if shown:
            logging.enable_progress_bar()


def _example(source, number: int) -> str:
    return f"line {number}" if source.kind == "text" else f"example {number}"


def _summary(stats: dict, predictor: Predictor, args) -> str:
    lines = stats.get("lines_in_output", stats["lines"])
    speed = stats["lines"] / stats["seconds"] if stats["seconds"] else 0.0
    where = "standard output" if args.output_file == "-" else args.output_file
    notes = [f"{lines:,} lines to {where} in {stats['seconds']:.1f} s ({speed:,.1f} lines/s here)"]
    if stats.get("resumed_windows"):
        notes.append(f"{stats['resumed_windows']} windows kept from an earlier run")
    if stats.get("truncated"):
        notes.append(f"{stats['truncated']:,} inputs longer than the {predictor.max_source_tokens} tokens the model "
                     "reads were truncated (--strict refuses them)")
    if stats.get("replaced"):
        notes.append(f"{stats['replaced']:,} lines held bytes that were not UTF-8, read as U+FFFD")
    return "; ".join(notes) + "."


def _say(args, text: str) -> None:
    if not args.quiet:
        print(f"{Path(sys.argv[0]).name}: {text}", file=sys.stderr)


def console_main() -> None:
    """The `vaswani-predict` command."""
    run_command(main)


__all__ = ["PredictionArguments", "console_main", "main", "predict"]
