"""What a run needs before its first update: an output folder that holds no other run and can be written, the
tokenizer (given, or learned from the training data), and the model built from a preset."""

import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import datasets
from transformers import AutoTokenizer

from .. import PRESETS, VaswaniConfig, VaswaniForConditionalGeneration, VaswaniTokenizer
from ..cli import parse_config_overrides
from ..data.loading import split_paths
from ..output_paths import Inputs, check_output_dir, fsync_tree
from ..remote_code.loading_checks import check_fits_in_memory
from .arguments import TrainDataArguments, TrainModelArguments, TrainArguments
from ..runs.errors import TrainingError
from ..runs.ownership import release_output_dir, take_output_dir
from ..runs.manifests import MANIFEST_FILE
from ..runs.records import ARGUMENTS_FILE
from .checkpoints import remove_leftovers
from .run_files import (
    TOKENIZER,
    foreign_checkpoint,
    mark,
    remove_own,
    remove_run_file,
    run_files_problem,
    seal,
    unmarked_in_the_way,
)
from .seq2seq_data import training_texts


# What a run writes into its output folder; finding any of them means a run was there before.
RUN_FILES = ("checkpoints", "best", "last", "tokenizer", "tensorboard", "metrics.jsonl", "summary.json",
             "training_curves.png", ARGUMENTS_FILE)


def prepare_output_dir(
    accelerator, output_dir: Path, args: TrainArguments, inputs: Inputs | None = None
) -> int | None:
    """Take the folder for this run (one writer: `ownership`), refuse to mix two runs in it, and find out before
    training whether it is writable. Returns the lock's descriptor on the main process (None on the others).
    `inputs` (option -> path: `run_inputs`) are what the run reads: the folder must be apart from them
    (vaswani.output_paths), so that neither --overwrite_output_dir nor the run's own files replace them."""
    check_output_dir(output_dir, inputs or {})  # on every process: they all stop together
    lock = None
    if accelerator.is_main_process:
        if output_dir.exists() and not output_dir.is_dir():
            raise NotADirectoryError(f"--output_dir {output_dir} is a file, not a folder.")
        try:
            output_dir.mkdir(parents=True, exist_ok=True)
            lock, note = take_output_dir(output_dir)
        except OSError as error:
            raise TrainingError(f"--output_dir {output_dir} is not writable: {error}.") from error
        if note:
            accelerator.print(f"Note: {note}; taking the folder over.")
        try:
            previous = [name for name in RUN_FILES if os.path.lexists(output_dir / name)]
            if previous and not args.resume:
                if not args.overwrite_output_dir:
                    raise TrainingError(
                        f"--output_dir {output_dir} already holds a run ({', '.join(previous)}). Continue it with "
                        "--resume, start over with --overwrite_output_dir, or choose another folder."
                    )
                _refuse_what_a_run_did_not_write(output_dir, tuple(previous), "--overwrite_output_dir would delete")
                for name in previous:
                    remove_run_file(output_dir / name)
            elif args.resume:  # the run replaces best/ and last/, prunes checkpoints and saves its own among them
                _refuse_what_a_run_did_not_write(output_dir, ("best", "last"), "--resume would replace")
            foreign = foreign_checkpoint(output_dir / "checkpoints")
            if foreign is not None:
                raise TrainingError(
                    f"--output_dir {output_dir}: {foreign} is not a checkpoint of this project's runs (it holds no "
                    "record that a run wrote it), and the run would prune it or save its own checkpoint over it. Move "
                    "it out of checkpoints/, then run again."
                )
            try:  # a name of its own: nothing of the user's is written over or deleted to find out
                descriptor, probe = tempfile.mkstemp(prefix=".write-test-", dir=output_dir)
                os.close(descriptor)
                os.unlink(probe)
            except OSError as error:
                raise TrainingError(f"--output_dir {output_dir} is not writable: {error}.") from error
            unmarked = remove_leftovers(output_dir, say=accelerator.print)
            unmarked += [f"checkpoints/{name}" for name in
                         remove_leftovers(output_dir / "checkpoints", say=accelerator.print)]
            if unmarked:
                raise TrainingError(unmarked_in_the_way(output_dir, unmarked))
        except BaseException:
            release_output_dir(lock)
            raise
    accelerator.wait_for_everyone()
    return lock


def run_inputs(data: TrainDataArguments, model_args: TrainModelArguments) -> Inputs:
    """What a run reads from disk, by option: its data files and its tokenizer."""
    return {
        "--train_file": split_paths(data.train_file or ""),
        "--validation_file": split_paths(data.validation_file or ""),
        "--tokenizer": model_args.tokenizer,
    }


def _refuse_what_a_run_did_not_write(output_dir: Path, names: tuple[str, ...], action: str) -> None:
    """Stop, naming it, where one of the run files `names` holds something a run of this project did not write
    (vaswani.training.run_files): a file of another tool's in checkpoints/, a tokenizer of another kind, a file of
    the user's in best/, one changed since the run wrote it."""
    problem = run_files_problem(output_dir, names)
    if problem is not None:
        raise TrainingError(
            f"--output_dir {output_dir}: {action} what an earlier run wrote there, but it holds {problem}: nothing "
            "was deleted. Move it away (or choose another --output_dir), then run again."
        )


def obtain_tokenizer(accelerator, model_args: TrainModelArguments, train_raw, data: TrainDataArguments, output_dir: Path,
                     wait_for_everyone=None):
    """The tokenizer given with --tokenizer, or the one this run learned from its training data (learned once, by
    the main process, and saved in output_dir/tokenizer; every process, and a resumed run, loads that copy). A
    tokenizer learned before from the same training data with the same options (`learned_tokenizer_cache`: another
    run of the config, or the big model's run after the base's) is copied instead of learned again. The other
    processes wait with `wait_for_everyone` (default: the accelerator's)."""
    if model_args.tokenizer is not None:
        return AutoTokenizer.from_pretrained(model_args.tokenizer)
    folder = output_dir / "tokenizer"
    if accelerator.is_main_process and not folder.is_dir():
        temporary = output_dir / ".tmp-tokenizer"
        if os.path.lexists(temporary) and not remove_own(temporary, TOKENIZER):
            raise TrainingError(f"--output_dir {output_dir}: {temporary} is in the way of the tokenizer the run "
                                "learns, and is not the run's: move it away, then run again.")
        mark(temporary, TOKENIZER)
        cached = learned_tokenizer_cache(train_raw, data, model_args)
        if cached is not None and (cached / "tokenizer.json").is_file():
            accelerator.print(f"The {model_args.vocab_size}-token vocabulary learned before from the same training "
                              f"data with the same options: {cached}")
            shutil.copytree(cached, temporary, dirs_exist_ok=True, ignore=shutil.ignore_patterns(MANIFEST_FILE))
        else:
            accelerator.print(f"Learning a {model_args.vocab_size}-token vocabulary from the training data ...")
            started = time.perf_counter()
            tokenizer = VaswaniTokenizer.train_from_texts(
                training_texts(train_raw, data), vocab_size=model_args.vocab_size,
                split_punctuation=model_args.split_punctuation, split_newlines=model_args.split_newlines,
            )
            tokenizer.save_pretrained(temporary)
            accelerator.print(f"Learned the vocabulary in {time.perf_counter() - started:.0f} s.")
            if cached is not None:
                _keep_learned_tokenizer(temporary, cached)
        seal(temporary, TOKENIZER)
        fsync_tree(temporary)
        temporary.rename(folder)
    (wait_for_everyone or accelerator.wait_for_everyone)()
    return AutoTokenizer.from_pretrained(folder)


# bumped when learning a tokenizer from the same texts and options would give another one
TOKENIZER_LEARNING_VERSION = 1


def learned_tokenizer_cache(train_raw, data: TrainDataArguments, model_args: TrainModelArguments) -> Path | None:
    """Where a tokenizer learned from `train_raw` with these options is kept for the runs after it: a folder of
    `datasets`' cache named by the training split's fingerprint (which `datasets` derives from the files or the Hub
    revision it was read from, and the selection made of them), the columns and the learning options. None for a
    split held in memory only, whose fingerprint names no content that outlives the process."""
    if not train_raw.cache_files:
        return None
    key = json.dumps([TOKENIZER_LEARNING_VERSION, train_raw._fingerprint, data.source_column, data.target_column,
                      model_args.vocab_size, model_args.split_punctuation, model_args.split_newlines])
    return Path(datasets.config.HF_DATASETS_CACHE) / "vaswani_tokenizers" / hashlib.sha256(key.encode()).hexdigest()[:32]


def _keep_learned_tokenizer(folder: Path, cached: Path) -> None:
    """A copy of the tokenizer just learned in `cached`, whole or not at all; a cache that cannot be written only
    costs the next run the learning."""
    temporary = cached.with_name(f".tmp-{cached.name}-{os.getpid()}")
    try:
        shutil.copytree(folder, temporary, ignore=shutil.ignore_patterns(MANIFEST_FILE))
        temporary.rename(cached)
    except OSError:
        shutil.rmtree(temporary, ignore_errors=True)


def build_model(model_args: TrainModelArguments, data: TrainDataArguments, args: TrainArguments, tokenizer):
    overrides = parse_config_overrides(model_args.config_overrides)
    config = VaswaniConfig.from_preset(
        model_args.preset,
        **{
            "vocab_size": len(tokenizer),
            "dropout": model_args.dropout,
            "label_smoothing": model_args.label_smoothing,
            "source_lang": data.source_lang,
            "target_lang": data.target_lang,
            "pad_token_id": tokenizer.pad_token_id,
            "bos_token_id": tokenizer.bos_token_id,
            "eos_token_id": tokenizer.eos_token_id,
            "decoder_start_token_id": tokenizer.bos_token_id,
            **overrides,
        },
    )
    check_lengths_fit(data, args, config.max_position_embeddings)
    check_fits_in_memory(config)  # before it is built: a model too large for this machine is refused in one line
    model = VaswaniForConditionalGeneration(config)
    # the saved tokenizer cuts inputs (in the pipelines) to what the model accepts
    tokenizer.model_max_length = config.max_position_embeddings
    # the saved models decode as they were scored here, also in the pipelines
    for name, value in generation_settings(args).items():
        setattr(model.generation_config, name, value)
    if model_args.gradient_checkpointing:
        model.activation_checkpointing_enable()
    return model


def check_lengths_fit(data: TrainDataArguments, args: TrainArguments, max_positions: int) -> None:
    """The lengths the run asks for fit the model's position table."""
    needed = {
        "--max_source_length": data.max_source_length,
        "--max_target_length": data.max_target_length,
        "--eval_max_new_tokens (+1)": args.eval_max_new_tokens + 1,
    }
    for option, length in needed.items():
        if length > max_positions:
            raise ValueError(
                f"{option} is {length}, beyond the model's max_position_embeddings={max_positions}; lower it, or "
                f"raise the limit with --config_overrides max_position_embeddings={length}."
            )


def check_lengths_before_work(data: TrainDataArguments, model_args: TrainModelArguments, args: TrainArguments) -> None:
    """`check_lengths_fit` before anything is loaded or learned (a tokenizer learned from a large corpus takes
    minutes): the position table is the preset's, or --config_overrides'."""
    overrides = parse_config_overrides(model_args.config_overrides)
    max_positions = overrides.get("max_position_embeddings", PRESETS[model_args.preset].get(
        "max_position_embeddings", VaswaniConfig().max_position_embeddings))
    if isinstance(max_positions, int) and not isinstance(max_positions, bool):
        check_lengths_fit(data, args, max_positions)


def generation_settings(args: TrainArguments) -> dict:
    settings = {"num_beams": args.eval_num_beams, "max_new_tokens": args.eval_max_new_tokens}
    if args.eval_num_beams > 1:  # transformers refuses a length penalty that greedy decoding would ignore
        settings["length_penalty"] = args.eval_length_penalty
    return settings


__all__ = [
    "build_model",
    "check_lengths_before_work",
    "check_lengths_fit",
    "generation_settings",
    "learned_tokenizer_cache",
    "obtain_tokenizer",
    "prepare_output_dir",
    "run_inputs",
]
