"""Self-supervised pretraining pairs from plain text: each sentence paired with a copy that has words deleted.

    python scripts/make_denoising_pairs.py --texts ../shared/data/sst2/train.jsonl:text --output_dir outputs/sst2_denoising_data

A text classifier trained from scratch on SST-2's 67,349 labelled phrases overfits them (training loss 0.27 against a
validation loss of 0.58 after three epochs) and stops near 80% accuracy. These pairs let the whole encoder-decoder
learn the language of the texts first, without labels: the source is the text with spans of words deleted, the
target the text itself, so the model must read the source and rebuild what is missing (BART's "token deletion"
noise, Lewis et al. 2020, at the word level: no mask token is needed, and the model must also find where words are
missing). Train on them with `scripts/train.py`, then fine-tune with `scripts/finetune_classification.py
--model_name_or_path`: as in BART, the classifier reads the decoder's state at the last token, so both halves of the
pretrained model are used (the SST-2 recipe in scripts/configs/recipes.yaml).

`--texts` takes one or more `FILE:COLUMN` pairs (a column holding a list of words, like CoNLL's `tokens`, is joined
with spaces). Each text is split into lines and the lines into pieces of at most `--max_words` words; pieces of
fewer than `--min_words` words are dropped, and repeated pieces kept once. Writes `train.jsonl` and
`validation.jsonl` (`--validation_size` pieces drawn at random, held out) to `--output_dir`, each row
`{"noisy": ..., "text": ...}`.
"""

import math
import random
import reprlib
from dataclasses import dataclass, field

from transformers import HfArgumentParser

from vaswani.cli import run_command
from vaswani.data.loading import load_split, require_columns, write_train_validation
from vaswani.output_paths import OutputFolder


@dataclass
class DenoisingArguments:
    texts: list[str] = field(metadata={"help": "FILE:COLUMN pairs to read text from (a local file or Hub name)."})
    output_dir: str = field(metadata={"help": "Folder for train.jsonl and validation.jsonl."})
    deletion_rate: float = field(default=0.3, metadata={"help": "Share of each piece's words deleted from the source."})
    mean_span: float = field(default=3.0, metadata={"help": "Mean length in words of a deleted span (Poisson)."})
    min_words: int = field(default=3, metadata={"help": "Shorter pieces are dropped."})
    max_words: int = field(default=60, metadata={"help": "Longer lines are cut into pieces of at most N words."})
    lowercase: bool = field(default=False, metadata={"help": "Lowercase the text (SST-2 is lowercased)."})
    validation_size: int = field(default=1000, metadata={"help": "Pieces held out for validation."})
    seed: int = field(default=0, metadata={"help": "Seed of the held-out draw and of the deletions."})
    overwrite_output_dir: bool = field(
        default=False, metadata={"help": "Replace what --output_dir holds (by default an existing folder is refused)."}
    )


def pieces(text: str, min_words: int, max_words: int) -> list[str]:
    """`text`'s lines cut into runs of at most `max_words` words, runs of fewer than `min_words` words dropped."""
    found = []
    for line in text.splitlines():
        words = line.split()
        for start in range(0, len(words), max_words):
            piece = words[start : start + max_words]
            if len(piece) >= min_words:
                found.append(" ".join(piece))
    return found


def poisson(rng: random.Random, mean: float) -> int:
    """A Poisson draw (Knuth's method; the means used here are small)."""
    limit, count, product = math.exp(-mean), 0, rng.random()
    while product > limit:
        count += 1
        product *= rng.random()
    return count


def delete_spans(text: str, rng: random.Random, deletion_rate: float = 0.3, mean_span: float = 3.0) -> str:
    """`text` with spans of words (lengths drawn from Poisson(`mean_span`), at least one word) deleted until
    `deletion_rate` of its words are gone; at least one word is deleted and at least one is kept."""
    words = text.split()
    budget = min(len(words) - 1, max(1, round(deletion_rate * len(words))))
    deleted = [False] * len(words)
    while budget > 0:
        span = min(budget, max(1, poisson(rng, mean_span)))
        start = rng.randrange(len(words) - span + 1)
        for index in range(start, start + span):
            if not deleted[index] and budget > 0:
                deleted[index] = True
                budget -= 1
    return " ".join(word for word, gone in zip(words, deleted) if not gone)


def read_texts(spec: str) -> list[str]:
    """The texts of one `FILE:COLUMN` pair."""
    path, separator, column = spec.rpartition(":")
    if not separator or not path or not column:
        raise ValueError(f"--texts takes FILE:COLUMN pairs (e.g. ../shared/data/sst2/train.jsonl:text), got {spec!r}.")
    dataset = load_split(path, "train", None)
    require_columns(dataset, [column], where=path)
    values = dataset[column]
    for row, value in enumerate(values, start=1):  # text, or a list of words (joined); null or empty: no text
        if not (value is None or isinstance(value, str)
                or isinstance(value, list) and all(isinstance(word, str) for word in value)):
            raise ValueError(f"{path}, row {row}: `{column}` holds {type(value).__name__} ({reprlib.repr(value)}), "
                             "not text: a string, or a list of words.")
    return [" ".join(value) if isinstance(value, list) else value for value in values if value]


def main(argv: list[str] | None = None) -> dict[str, int]:
    (args,) = HfArgumentParser(DenoisingArguments).parse_args_into_dataclasses(args=argv)
    if not 0 < args.deletion_rate < 1:
        raise ValueError(f"--deletion_rate must lie strictly between 0 and 1, got {args.deletion_rate}.")
    if args.mean_span <= 0:
        raise ValueError(f"--mean_span must be positive, got {args.mean_span}.")
    if not 2 <= args.min_words <= args.max_words:
        raise ValueError(
            f"--min_words must be at least 2 (one word must stay) and at most --max_words; got --min_words "
            f"{args.min_words}, --max_words {args.max_words}."
        )
    if args.validation_size < 0:
        raise ValueError(f"--validation_size must be 0 or more, got {args.validation_size}.")
    inputs = {"--texts": [spec.rpartition(":")[0] for spec in args.texts]}
    with OutputFolder(args.output_dir, inputs, overwrite=args.overwrite_output_dir) as output:
        unique, counts = {}, {}
        for spec in args.texts:
            found = [piece for text in read_texts(spec) for piece in pieces(text, args.min_words, args.max_words)]
            counts[spec] = len(found)
            for piece in found:
                unique.setdefault(piece.lower() if args.lowercase else piece, None)
        texts = list(unique)
        if len(texts) <= args.validation_size:
            raise ValueError(
                f"only {len(texts)} distinct pieces of {args.min_words}+ words in {args.texts}, not more than "
                f"--validation_size {args.validation_size}; lower it, or --min_words."
            )
        rng = random.Random(args.seed)
        rng.shuffle(texts)
        pairs = [{"noisy": delete_spans(text, rng, args.deletion_rate, args.mean_span), "text": text} for text in texts]
        with output.publish() as folder:
            cut = write_train_validation(pairs, folder, args.validation_size)
    read = ", ".join(f"{count} from {spec}" for spec, count in counts.items())
    print(f"{sum(counts.values())} pieces ({read}), {len(texts)} distinct -> {cut} training and "
          f"{len(pairs) - cut} validation pairs in {args.output_dir}.")
    return {"pieces": sum(counts.values()), "distinct": len(texts), "train": cut, "validation": len(pairs) - cut}


if __name__ == "__main__":
    run_command(main)
