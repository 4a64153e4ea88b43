"""Source/target pairs for training: load the splits, tokenize them with `datasets.map`, and drop the pairs that are
empty or too long, counting each kind. The tokenized pairs are cached on disk beside the split's own files, named by
the split's fingerprint and the tokenizer's content (`tokenized_cache_file`), so that the other processes of a run,
a resumed run and a second run read them back instead of tokenizing again.

Splits come from local JSON Lines / JSON / CSV files, a dataset on the Hub, or the synthetic toy task. Any two
columns serve as source and target (`en`/`de`, `document`/`summary`); a dotted name reaches into a dict column, as in
the Hub's WMT datasets (`translation.en`). Rows in transformers' translation format, `{"translation": {"en": ...,
"de": ...}}`, are read as its example scripts read them: --source_lang/--target_lang name the keys (else the column
options do).

`input_fingerprints` identifies what a run learns from (each data file by its content, the tokenizer by its files),
so that a resumed run can tell that it is given the same.
"""

import copy
import hashlib
import json
import time
from dataclasses import dataclass
from pathlib import Path

import datasets
import numpy as np
from accelerate.utils import broadcast_object_list
from tokenizers.models import BPE

from ..data.loading import (
    check_files_exist,
    data_source,
    dotted_values,
    load_split,
    require_columns,
    require_text,
    split_paths,
    unnest_translation,
)
from .arguments import SYNTHETIC_DATASET, TrainDataArguments
from .synthetic import write_synthetic_translation


HELD_OUT_FRACTION = 0.01  # of the training pairs, when a training file comes without a validation file
HELD_OUT_MAX = 1000


@dataclass
class SplitReport:
    """What happened to the rows of one split on their way to the model, and whether they were tokenized here or
    read from the cache an earlier run (or process) wrote."""

    name: str
    rows: int
    empty: int
    too_long: int
    truncated: int
    kept: int
    reused: bool = False
    seconds: float = 0.0

    def describe(self, data: TrainDataArguments) -> str:
        over = f"longer than {data.max_source_length}/{data.max_target_length} source/target tokens"
        handled = f"{self.too_long} dropped as {over}" if data.too_long == "drop" else f"{self.truncated} truncated"
        how = "read from the cache of an earlier tokenization" if self.reused else "tokenized"
        return (f"{self.name}: {self.rows} pairs -> {self.kept} kept ({self.empty} empty dropped, {handled}); "
                f"{how} in {self.seconds:.0f} s")


@dataclass
class PreparedData:
    train: datasets.Dataset  # input_ids, labels, source_length, target_length
    validation: datasets.Dataset  # the same, plus `source_text` and `target_text` (the references)
    reports: list[SplitReport]
    # the training pairs' source and target lengths, row for row (what the batches are packed from), read as arrays:
    # `datasets` gives a column of a dataset row by row (4.5M rows: minutes)
    train_lengths: tuple[np.ndarray, np.ndarray]


def load_raw_splits(data: TrainDataArguments, output_dir: Path, seed: int) -> tuple[datasets.Dataset, datasets.Dataset]:
    """The training and validation splits as they come, before tokenization. Training: --train_file or
    --dataset_name (the synthetic task by default); validation: --validation_file, else the Hub dataset's
    --validation_split, else a few pairs held out of the training file."""
    source, validation = _training_source(data), data.validation_file
    if source == SYNTHETIC_DATASET:
        paths = write_synthetic_translation(
            output_dir / "data", data.synthetic_train_size, data.synthetic_validation_size, seed=seed
        )
        source, validation = str(paths["train"]), str(paths["validation"])
    elif validation is not None:
        check_files_exist(validation, "--validation_file")

    train = _flat_columns(load_split(source, data.train_split, data.dataset_config_name), data, source)
    _check_columns(train, data, source)
    if validation is not None:
        valid = _flat_columns(load_split(validation, data.validation_split, data.dataset_config_name), data, validation)
    elif data.train_file is None:
        valid = _flat_columns(load_split(source, data.validation_split, data.dataset_config_name), data, source)
    else:
        # a local training file alone: hold out a few of its pairs, the same ones for a given seed
        held_out = max(1, min(HELD_OUT_MAX, int(len(train) * HELD_OUT_FRACTION)))
        if len(train) < 2:
            raise ValueError(f"{source} has {len(train)} row(s): too few to train on and hold out a validation set.")
        split = train.train_test_split(test_size=held_out, seed=seed)
        train, valid = split["train"], split["test"]
    _check_columns(valid, data, validation or source)

    if data.max_train_samples is not None:
        train = train.select(range(min(data.max_train_samples, len(train))))
    return train, valid


def _training_source(data: TrainDataArguments) -> str:
    """--train_file or --dataset_name, checked (vaswani.data.loading.data_source); `synthetic` is no Hub dataset."""
    if data.dataset_name == SYNTHETIC_DATASET and data.train_file is None:
        return SYNTHETIC_DATASET
    return data_source(data.train_file, data.dataset_name, "--train_file", needed_by="Training")


def _flat_columns(split: datasets.Dataset, data: TrainDataArguments, where: str) -> datasets.Dataset:
    """The split with --source_column and --target_column, read from its `translation` dicts where it is in
    transformers' translation format (the keys --source_lang/--target_lang, else the column names)."""
    keys = {column: lang or column for column, lang in ((data.source_column, data.source_lang),
                                                        (data.target_column, data.target_lang)) if "." not in column}
    return unnest_translation(split, keys, where=where)


def _check_columns(split: datasets.Dataset, data: TrainDataArguments, where: str) -> None:
    """The split has rows and both columns, and their values are text (a null counts as an empty pair)."""
    if len(split) == 0:
        raise ValueError(f"The dataset {where} is empty: it holds no rows to train or validate on.")
    require_columns(split, [c.split(".")[0] for c in (data.source_column, data.target_column)], where=where)
    require_text(split, [data.source_column, data.target_column], where=where)


def _column_values(batch: dict, column: str) -> list:
    """The values of `column` in a batch; `translation.en` reads key `en` of the dict column `translation`."""
    return list(dotted_values(batch[column.partition(".")[0]], column))


def _tokenize_pairs(
    batch: dict,
    tokenizer,
    source_column: str,
    target_column: str,
    max_source_length: int,
    max_target_length: int,
    truncate: bool,
) -> dict:
    """One `datasets.map` batch: token ids of both sides, their lengths, and whether the pair is usable.

    Without truncation the full lengths are kept, so that the filter after this step can count what is too long.
    """
    sources = [text if isinstance(text, str) else "" for text in _column_values(batch, source_column)]
    targets = [text if isinstance(text, str) else "" for text in _column_values(batch, target_column)]
    # (transformers 5 truncates whenever max_length is given, so it is given only when truncating)
    full_source = tokenizer(sources)["input_ids"]
    full_target = tokenizer(text_target=targets)["input_ids"]
    source_ids, target_ids = full_source, full_target
    if truncate:
        source_ids = tokenizer(sources, max_length=max_source_length, truncation=True)["input_ids"]
        target_ids = tokenizer(text_target=targets, max_length=max_target_length, truncation=True)["input_ids"]
    return {
        "input_ids": source_ids,
        "labels": target_ids,
        "source_length": [len(ids) for ids in source_ids],
        "target_length": [len(ids) for ids in target_ids],
        "empty": [not s.strip() or not t.strip() for s, t in zip(sources, targets)],
        "too_long": [
            len(s) > max_source_length or len(t) > max_target_length for s, t in zip(full_source, full_target)
        ],
        "source_text": sources,
        "target_text": targets,
    }


# bumped when _tokenize_pairs gives other rows for the same pairs and tokenizer: older caches are then not read
TOKENIZATION_VERSION = 1


def tokenizer_digest(tokenizer) -> str | None:
    """The SHA-256 of what decides a tokenizer's ids (its class, its `tokenizers` rules and vocabulary, its
    settings), not of where it was loaded from; None for a tokenizer without a `tokenizers` backend."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None:
        return None
    settings = {name: str(value) for name, value in tokenizer.init_kwargs.items()
                if name not in ("name_or_path", "is_local", "local_files_only", "model_max_length")}
    # (the truncation and padding a call last set on the backend are that call's, not the tokenizer's)
    rules = {part: value for part, value in json.loads(backend.to_str()).items() if part not in ("truncation", "padding")}
    content = json.dumps([type(tokenizer).__qualname__, rules, settings], sort_keys=True)
    return hashlib.sha256(content.encode("utf-8")).hexdigest()


def tokenized_cache_file(raw: datasets.Dataset, tokenizer, data: TrainDataArguments) -> Path | None:
    """Where the tokenized pairs of `raw` are kept: beside the split's own cache files, named by the split's
    fingerprint, the tokenizer's content (`tokenizer_digest`), the columns and the length rules; so that a resumed
    run, a second run (with the same data and a tokenizer of the same content, wherever it is saved) and every
    process of a run read one tokenization. None where the split has no cache files or the tokenizer no digest
    (`datasets` then caches by its own hash of the call, if it can)."""
    digest = tokenizer_digest(tokenizer)
    if not raw.cache_files or digest is None:
        return None
    key = json.dumps([TOKENIZATION_VERSION, raw._fingerprint, digest, data.source_column, data.target_column,
                      data.max_source_length, data.max_target_length, data.too_long])
    fingerprint = hashlib.sha256(key.encode("utf-8")).hexdigest()[:32]
    return Path(raw.cache_files[0]["filename"]).parent / f"vaswani-tokenized-{fingerprint}.arrow"


def _cache_written(path: Path) -> bool:
    """Whether `path`, or every shard of it that workers wrote (`name_0000i_of_0000n.arrow`), is there."""
    if path.is_file():
        return True
    shards = list(path.parent.glob(f"{path.stem}_*_of_*{path.suffix}"))
    counts = {int(shard.stem.rsplit("_of_", 1)[1]) for shard in shards}
    return any(sum(shard.stem.endswith(f"_of_{count:05d}") for shard in shards) == count for count in counts)


def _tokenize_split(
    raw: datasets.Dataset, tokenizer, data: TrainDataArguments, name: str, keep_text: bool
) -> tuple[datasets.Dataset, SplitReport]:
    truncate = data.too_long == "truncate"
    started = time.perf_counter()
    cache_file = tokenized_cache_file(raw, tokenizer, data)
    reused = cache_file is not None and _cache_written(cache_file)
    tokenized = raw.map(
        _tokenize_pairs,
        batched=True,
        remove_columns=raw.column_names,
        num_proc=data.preprocessing_num_workers,
        cache_file_name=str(cache_file) if cache_file is not None else None,
        new_fingerprint=cache_file.stem.rsplit("-", 1)[1] if cache_file is not None else None,
        fn_kwargs=dict(
            tokenizer=tokenizer,
            source_column=data.source_column,
            target_column=data.target_column,
            max_source_length=data.max_source_length,
            max_target_length=data.max_target_length,
            truncate=truncate,
        ),
        desc=f"Tokenizing {name}",
    )
    # the flags and lengths as whole arrays, straight from the Arrow table the map wrote (no row is converted)
    empty, long, source_lengths, target_lengths = (
        tokenized.data.column(column).to_numpy(zero_copy_only=False)
        for column in ("empty", "too_long", "source_length", "target_length")
    )
    too_long = int((long & ~empty).sum())
    keep = ~empty if truncate else ~(empty | long)
    kept = tokenized if keep.all() else tokenized.select(np.flatnonzero(keep))
    kept = kept.remove_columns(["empty", "too_long"] + ([] if keep_text else ["source_text", "target_text"]))
    report = SplitReport(
        name=name,
        rows=len(raw),
        empty=int(empty.sum()),
        too_long=too_long if not truncate else 0,
        truncated=too_long if truncate else 0,
        kept=len(kept),
        reused=reused,
        seconds=time.perf_counter() - started,
    )
    if len(kept) == 0:
        raise ValueError(f"No usable pair is left in the {report.describe(data)}.")
    return kept, report, (source_lengths[keep], target_lengths[keep])


def prepare_data(
    train_raw: datasets.Dataset, validation_raw: datasets.Dataset, tokenizer, data: TrainDataArguments
) -> PreparedData:
    # with BPE-dropout, the training pairs are segmented anew from their text every epoch (BpeDropoutEpochs)
    train, train_report, train_lengths = _tokenize_split(train_raw, tokenizer, data, "train",
                                                         keep_text=data.bpe_dropout > 0)
    validation, validation_report, _ = _tokenize_split(validation_raw, tokenizer, data, "validation", keep_text=True)
    return PreparedData(train=train, validation=validation, reports=[train_report, validation_report],
                        train_lengths=train_lengths)


def bpe_dropout_tokenizer(tokenizer, probability: float):
    """A copy of `tokenizer` that skips each BPE merge with `probability` (BPE-dropout, Provilkov et al., 2020):
    the same word then comes out in different, finer pieces from one epoch to the next, a regularizer for small
    datasets. The draws are the `tokenizers` library's own (it takes no seed), so such a run is not repeatable to the
    last bit, as runs without it are."""
    model = tokenizer.backend_tokenizer.model
    if not isinstance(model, BPE):
        raise ValueError(f"--bpe_dropout needs a BPE tokenizer; this one's subword model is {type(model).__name__}.")
    noisy = copy.deepcopy(tokenizer)
    noisy.backend_tokenizer.model.dropout = probability
    return noisy


class BpeDropoutEpochs:
    """The training pairs under BPE-dropout: every epoch, the whole training split segmented anew by
    `bpe_dropout_tokenizer` and cut at the length limits (which the finer pieces may pass). The epoch's batches are
    packed from these lengths (`TokenBudgetBatches(epoch_lengths=...)`), so that a batch keeps its token budget and
    stays nearly free of padding; batching by the usual segmentation's lengths instead padded ~1.5x more tokens and
    trained 1.6x slower (Multi30k, p=0.1). The main process draws the segmentation and sends it to the others, so that
    all processes batch the same pieces; a run resumed in the middle of an epoch draws that epoch anew."""

    def __init__(self, train: datasets.Dataset, tokenizer, data: TrainDataArguments, accelerator):
        self.texts = train.select_columns(["source_text", "target_text"])[:]  # read once: {column: [str, ...]}
        self.tokenizer = bpe_dropout_tokenizer(tokenizer, data.bpe_dropout)
        self.data, self.accelerator = data, accelerator
        self.epoch, self.pairs = None, None

    def segment(self, epoch: int) -> dict[str, list[list[int]]]:
        if epoch != self.epoch:
            pairs = [None]
            if self.accelerator.is_main_process:
                texts, data = self.texts, self.data
                pairs = [{
                    "input_ids": self.tokenizer(
                        texts["source_text"], max_length=data.max_source_length, truncation=True
                    )["input_ids"],
                    "labels": self.tokenizer(
                        text_target=texts["target_text"], max_length=data.max_target_length, truncation=True
                    )["input_ids"],
                }]
            broadcast_object_list(pairs)
            self.epoch, self.pairs = epoch, pairs[0]
        return self.pairs

    def lengths(self, epoch: int) -> tuple[list[int], list[int]]:
        pairs = self.segment(epoch)
        return [len(ids) for ids in pairs["input_ids"]], [len(ids) for ids in pairs["labels"]]

    def rows(self, epoch: int, indices: list[int]) -> dict[str, list[list[int]]]:
        pairs = self.segment(epoch)
        return {column: [pairs[column][i] for i in indices] for column in ("input_ids", "labels")}


def training_texts(train_raw: datasets.Dataset, data: TrainDataArguments):
    """Source and target strings of the training split, to learn a tokenizer from."""
    for batch in train_raw.iter(batch_size=1000):
        for column in (data.source_column, data.target_column):
            for text in _column_values(batch, column):
                if isinstance(text, str) and text:
                    yield text


# the files of a saved tokenizer besides its class's own vocabulary files (`vocab_files_names`)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def _file_fingerprint(path: Path) -> dict:
    """The SHA-256 of a file's bytes, read in chunks whatever its size, and the size."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return {"sha256": digest.hexdigest(), "bytes": path.stat().st_size}


def input_fingerprints(
    accelerator, data: TrainDataArguments, output_dir: Path, train_raw: datasets.Dataset,
    validation_raw: datasets.Dataset, tokenizer, tokenizer_option: str | None,
) -> dict[str, dict]:
    """What the run learns from, each part named as the user knows it and fingerprinted by its content: each local
    data file (`--train_file x.jsonl`) by its SHA-256 and size; a Hub dataset by its name, configuration, split and
    the fingerprint `datasets` gives the split loaded (which follows the revision downloaded); the synthetic task by
    the files this run writes it to (its options and the generator decide them); the tokenizer by its saved files
    (`--tokenizer`'s folder, or the one the run learned, in output_dir/tokenizer). No name holds output_dir, which a
    resumed run may move. Computed by the main process and sent to the others."""
    fingerprints = [None]
    if accelerator.is_main_process:
        fingerprints = [{
            **_data_fingerprints(data, output_dir, train_raw, validation_raw),
            **_tokenizer_fingerprints(tokenizer, tokenizer_option, output_dir / "tokenizer"),
        }]
    broadcast_object_list(fingerprints)
    return fingerprints[0]


def _data_fingerprints(data: TrainDataArguments, output_dir: Path, train_raw: datasets.Dataset,
                      validation_raw: datasets.Dataset) -> dict[str, dict]:
    if _training_source(data) == SYNTHETIC_DATASET:
        folder = output_dir / "data"  # where load_raw_splits had write_synthetic_translation write the pairs
        return {f"--dataset_name {SYNTHETIC_DATASET} ({name})": _file_fingerprint(folder / name)
                for name in ("train.jsonl", "validation.jsonl")}
    fingerprints = {}
    for option, files in (("--train_file", data.train_file), ("--validation_file", data.validation_file)):
        for path in split_paths(files or ""):
            fingerprints[f"{option} {path}"] = _file_fingerprint(Path(path))
    if data.train_file is None:  # a Hub dataset
        fingerprints[f"--dataset_name {data.dataset_name} (split {data.train_split})"] = {
            "config": data.dataset_config_name, "fingerprint": train_raw._fingerprint,
        }
        if data.validation_file is None:
            fingerprints[f"--dataset_name {data.dataset_name} (split {data.validation_split})"] = {
                "config": data.dataset_config_name, "fingerprint": validation_raw._fingerprint,
            }
    return fingerprints


def _tokenizer_fingerprints(tokenizer, tokenizer_option: str | None, learned: Path) -> dict[str, dict]:
    """Each saved file of the tokenizer; a tokenizer from the Hub (not a folder) by the SHA-256 of its vocabulary,
    merges and rules as the `tokenizers` library writes them out."""
    folder = Path(tokenizer_option) if tokenizer_option is not None else learned
    where = f"--tokenizer {tokenizer_option}" if tokenizer_option is not None else "the tokenizer learned (tokenizer/)"
    if not folder.is_dir():
        content = tokenizer.backend_tokenizer.to_str().encode("utf-8")
        return {where: {"sha256": hashlib.sha256(content).hexdigest(), "bytes": len(content)}}
    names = sorted({*TOKENIZER_FILES, *getattr(tokenizer, "vocab_files_names", {}).values()})
    return {f"{where}: {name}": _file_fingerprint(folder / name) for name in names if (folder / name).is_file()}


def changed_inputs(saved: dict, current: dict) -> list[str]:
    """In words, each part of the inputs whose fingerprint differs between a checkpoint's record and this run."""
    return [f"{name}: {_describe_fingerprint(saved.get(name))} -> {_describe_fingerprint(current.get(name))}"
            for name in sorted(saved.keys() | current.keys()) if saved.get(name) != current.get(name)]


def _describe_fingerprint(fingerprint) -> str:
    if fingerprint is None:
        return "(none)"
    if isinstance(fingerprint, dict) and "sha256" in fingerprint:
        return f"sha256 {str(fingerprint['sha256'])[:16]}, {fingerprint.get('bytes')} bytes"
    if isinstance(fingerprint, dict) and "fingerprint" in fingerprint:
        return f"config {fingerprint.get('config')}, datasets fingerprint {fingerprint['fingerprint']}"
    return repr(fingerprint)[:80]


__all__ = [
    "BpeDropoutEpochs",
    "PreparedData",
    "bpe_dropout_tokenizer",
    "changed_inputs",
    "input_fingerprints",
    "load_raw_splits",
    "prepare_data",
    "tokenized_cache_file",
    "tokenizer_digest",
    "training_texts",
]
