"""Batches by token count, as in the paper (section 5.1): "each training batch contained a set of sentence pairs
containing approximately 25000 source tokens and 25000 target tokens".

Pairs of similar length go together (sorted by source length, then target length, ties broken at random), so that
little of a batch is padding; each batch holds as many pairs as fit under the budget, counting padded tokens on
each side. The order of the batches is then shuffled. Everything depends only on (seed, epoch), so every process
computes the same list, takes its own share of it, and a resumed run finds the exact batch it stopped at.

The list of an epoch does not depend on the number of processes either: N processes take its batches N at a time, so
after `position` batches each they have trained on its first `position * N`. A run resumed on M processes goes on
from there (`continue_epoch`), dealing the rest of that epoch out among its M: the same pairs trained on, in the same
order, grouped into other updates.

For a compiled model (`--torch_compile`), batches also take their shapes from a small set (`BatchShapes`): each
length is padded up to the next of a geometric series of sizes and the number of pairs likewise, so that the
compiled step meets a handful of shapes in an epoch, not one per batch. The packing counts the padded sizes against
the budget. Padding changes nothing in the loss: padded positions are masked in attention and carry the label -100,
and whole padding rows (which fill up the number of pairs) carry no label at all.
"""

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import torch


def _bucketed(size: int) -> int:
    """`size` rounded up to the next of a geometric series of sizes: multiples of 8 up to 64, then four per doubling
    (80, 96, 112, 128, 160, ...), so that padding adds at most a quarter beyond 64 and every size is a multiple of 8
    (what tensor cores work in)."""
    step = max(8, 1 << max(0, (size - 1).bit_length() - 3))
    return -(-size // step) * step


@dataclass(frozen=True)
class BatchShapes:
    """The shapes a compiled model is given: lengths and numbers of pairs from the series of `_bucketed`, within the
    token budget `max_tokens` (pairs x length, on each side) and the `longest` sequence the model takes (its
    max_position_embeddings)."""

    max_tokens: int
    longest: int

    def length(self, length: int) -> int:
        """The padded length of a side whose longest sequence has `length` tokens."""
        return max(length, min(_bucketed(length), self.longest, self.max_tokens))

    def rows(self, rows: int, length: int) -> int:
        """The padded number of pairs of a batch of `rows` pairs padded to `length` tokens: bucketed, but never past
        the budget (a full batch stays as it is)."""
        return max(rows, min(_bucketed(rows), self.max_tokens // length))


def _pack_by_tokens(order: Sequence[int], source_lengths, target_lengths, max_tokens: int,
                   shapes: BatchShapes | None = None) -> list[list[int]]:
    """Cut `order` (already sorted by length) into consecutive batches whose padded size, the longest source or
    target times the number of pairs, stays within `max_tokens` on each side; with `shapes`, the longest lengths
    padded as that will pad them."""
    padded = shapes.length if shapes is not None else int
    batches, batch, longest_source, longest_target = [], [], 0, 0
    for index in order:
        source, target = padded(int(source_lengths[index])), padded(int(target_lengths[index]))
        grown_source, grown_target = max(longest_source, source), max(longest_target, target)
        if batch and max(grown_source, grown_target) * (len(batch) + 1) > max_tokens:
            batches.append(batch)
            batch, grown_source, grown_target = [], source, target
        batch.append(int(index))
        longest_source, longest_target = grown_source, grown_target
    if batch:
        batches.append(batch)
    return batches


class TokenBudgetBatches:
    """The training batches of each epoch for one process: length-bucketed, under a token budget, shuffled with
    (seed, epoch), and split so that every process gets a different, equally long list of batches."""

    def __init__(
        self,
        source_lengths: Sequence[int],
        target_lengths: Sequence[int],
        max_tokens: int,
        seed: int,
        num_processes: int = 1,
        process_index: int = 0,
        epoch_lengths: Callable[[int], tuple[Sequence[int], Sequence[int]]] | None = None,
        shapes: BatchShapes | None = None,
    ):
        """`epoch_lengths(epoch)`, when given, gives the pairs' lengths of that epoch, which then replace the fixed
        `source_lengths` and `target_lengths` (BPE-dropout segments the pairs anew every epoch). With `shapes`, the
        batches are packed for the shapes `collate` pads them to."""
        self.epoch_lengths = epoch_lengths
        self.shapes = shapes
        self.source_lengths = np.asarray(source_lengths)
        self.target_lengths = np.asarray(target_lengths)
        longest = int(max(self.source_lengths.max(), self.target_lengths.max()))
        if longest > max_tokens:
            raise ValueError(f"A pair of {longest} tokens does not fit a batch of max_tokens={max_tokens}.")
        self.max_tokens = max_tokens
        self.seed = seed
        self.num_processes = num_processes
        self.process_index = process_index
        self._cached: tuple[int, list[list[int]]] | None = None  # the last epoch asked for, and its batches
        self.continued: tuple[int, int] = (0, 0)  # (epoch, batch): where the shares of one epoch start (continue_epoch)

    def all_batches(self, epoch: int) -> list[list[int]]:
        """Every process's batches of one epoch, in training order."""
        source_lengths, target_lengths = self.source_lengths, self.target_lengths
        if self.epoch_lengths is not None:
            source_lengths, target_lengths = map(np.asarray, self.epoch_lengths(epoch))
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(len(source_lengths))
        # stable sorts: by target length, then by source length, so source length is the primary key
        order = order[np.argsort(target_lengths[order], kind="stable")]
        order = order[np.argsort(source_lengths[order], kind="stable")]
        batches = _pack_by_tokens(order, source_lengths, target_lengths, self.max_tokens, self.shapes)
        return [batches[i] for i in rng.permutation(len(batches))]

    def batches(self, epoch: int) -> list[list[int]]:
        """This process's batches: every `num_processes`-th one (from `first_batch(epoch)` on). The few left over at
        the end of an epoch are skipped, so that all processes take the same number of steps (a process waiting for
        another hangs)."""
        if self._cached is not None and self._cached[0] == epoch:
            return self._cached[1]
        first = self.first_batch(epoch)
        batches = self.all_batches(epoch)
        usable = first + share_length(len(batches), self.num_processes, first) * self.num_processes
        if usable == 0:
            raise ValueError(
                f"The training data make only {len(batches)} batch(es) of max_tokens={self.max_tokens}, fewer than "
                f"the {self.num_processes} processes: use more data or a smaller --max_tokens_per_batch."
            )
        self._cached = (epoch, batches[first + self.process_index : usable : self.num_processes])
        return self._cached[1]

    def continue_epoch(self, epoch: int, first_batch: int) -> None:
        """Share `epoch` from its batch `first_batch` on: the rest of an epoch that a run on another number of
        processes began (its first `first_batch` batches are trained on). Later epochs are shared from the start."""
        self.continued, self._cached = (epoch, first_batch), None

    def first_batch(self, epoch: int) -> int:
        """Where the processes' shares of `epoch` start in its list of batches: 0, but in a continued epoch."""
        return self.continued[1] if epoch == self.continued[0] else 0

    def next_position(self, epoch: int, position: int) -> tuple[int, int]:
        """Where the batch after batch `position` of `epoch` is."""
        if position + 1 < len(self.batches(epoch)):
            return epoch, position + 1
        return epoch + 1, 0

    def stream(self, epoch: int = 0, position: int = 0) -> Iterator[tuple[int, int, list[int]]]:
        """Batches without end, epoch after epoch, from batch `position` of `epoch` on: (epoch, position, indices)."""
        while True:
            batches = self.batches(epoch)
            for index in range(position, len(batches)):
                yield epoch, index, batches[index]
            epoch, position = epoch + 1, 0


def micro_batches_per_update(tokens_per_update: int, max_tokens_per_batch: int, num_processes: int) -> int:
    """Micro-batches each of `num_processes` processes takes per update, so that an update holds about
    `tokens_per_update` tokens in batches of at most `max_tokens_per_batch` (at least one)."""
    return max(1, round(tokens_per_update / (max_tokens_per_batch * num_processes)))


class UpdateSplit(NamedTuple):
    """How an update is made: `accumulation` micro-batches on each process, each packed to `micro_batch_tokens`
    tokens a side (padding counted)."""

    accumulation: int
    micro_batch_tokens: int

    def update_tokens(self, num_processes: int) -> int:
        """The token budget of one update a side, over all processes."""
        return num_processes * self.accumulation * self.micro_batch_tokens


def update_split(tokens_per_update: int, max_tokens_per_batch: int, num_processes: int,
                 exact: bool = False) -> UpdateSplit:
    """The micro-batches of an update on `num_processes` processes.

    Not `exact`: micro-batches of `max_tokens_per_batch`, as many per process as come nearest to `tokens_per_update`
    (`micro_batches_per_update`); the update then holds a multiple of num_processes x max_tokens_per_batch, which can
    be far from the target (4,096-token micro-batches on 8 processes: 32,768 for a target of 25,000). The batches of an
    epoch are the same whatever the number of processes.

    `exact`: the fewest micro-batches per process of at most `max_tokens_per_batch`, each cut to tokens_per_update /
    (processes x micro-batches), so that every update holds tokens_per_update to within that rounding on any number of
    processes (25,000 on one process of 25,000-token micro-batches, 8 of 3,125 or 16 of 1,562). The micro-batches,
    hence the batches of an epoch, then depend on the number of processes."""
    if not exact:
        return UpdateSplit(micro_batches_per_update(tokens_per_update, max_tokens_per_batch, num_processes),
                           max_tokens_per_batch)
    accumulation = -(-tokens_per_update // (max_tokens_per_batch * num_processes))
    return UpdateSplit(accumulation, max(1, tokens_per_update // (num_processes * accumulation)))


def share_length(batches: int, num_processes: int, first_batch: int = 0) -> int:
    """How many batches each of `num_processes` processes takes of an epoch of `batches` batches, from batch
    `first_batch` on (the rest, fewer than `num_processes`, is left out)."""
    return max(0, batches - first_batch) // num_processes


def evaluation_batches(
    source_lengths, target_lengths, max_tokens: int, num_processes: int, process_index: int
) -> list[tuple[list[int], bool]]:
    """Validation batches for the loss: the same packing, in length order, dealt out among the processes, as
    (indices, counted) pairs. Every process gets as many batches as the others (a sharded model, under FSDP, needs
    all processes in every forward pass); a process short of one repeats a batch with counted=False."""
    order = np.lexsort((np.asarray(target_lengths), np.asarray(source_lengths)))
    batches = _pack_by_tokens(order, source_lengths, target_lengths, max_tokens)
    mine = [(batch, True) for batch in batches[process_index::num_processes]]
    rounds = -(-len(batches) // num_processes)
    return mine + [(batches[0], False)] * (rounds - len(mine))


def generation_shards(source_lengths, batch_size: int, num_processes: int, process_index: int) -> list[list[int]]:
    """Validation pairs to translate, in length order, dealt out so that every process gets the same number of
    pairs and batches (the list is padded with repeats of the last pair; the repeats are dropped after the gather)."""
    order = [int(i) for i in np.argsort(np.asarray(source_lengths), kind="stable")]
    order += order[-1:] * (-len(order) % num_processes)
    mine = order[process_index::num_processes]
    return [mine[start : start + batch_size] for start in range(0, len(mine), batch_size)]


class StreamBatch(NamedTuple):
    """A batch of the stream, collated: where it is in the data, where the batch after it is, its tensors and its
    (source, target) tokens before padding."""

    epoch: int
    position: int
    following: tuple[int, int]
    tensors: dict[str, torch.Tensor]
    tokens: tuple[int, int]


class CollatingDataset(torch.utils.data.Dataset):
    """What a DataLoader's workers do with the batches of the stream: read their pairs and collate them. The keys
    (from `TokenBudgetBatches.stream`, in its order) are (epoch, position, following, pairs), `pairs` being the
    indices of the training pairs or, where only the main process holds them (BPE-dropout's segmentation of the
    epoch), the pairs themselves; nothing here draws a random number, so the batches are the same in any worker."""

    def __init__(self, rows, pad_token_id: int, shapes: BatchShapes | None = None):
        self.rows = rows  # the training pairs: a datasets.Dataset of input_ids and labels
        self.pad_token_id = pad_token_id
        self.shapes = shapes

    def __getitem__(self, key) -> StreamBatch:
        epoch, position, following, pairs = key
        rows = pairs if isinstance(pairs, dict) else self.rows[pairs]
        return StreamBatch(epoch, position, following, collate(rows, self.pad_token_id, self.shapes),
                           token_counts(rows))


def collate(rows: dict[str, list], pad_token_id: int, shapes: BatchShapes | None = None) -> dict[str, torch.Tensor]:
    """Right-pad a batch of tokenized pairs: `input_ids` and `attention_mask`, and `labels` with -100 on padding
    (left out of the loss). With `shapes`, each side is padded to its bucketed length and the batch filled up to its
    bucketed number of pairs with padding rows: a pad token that attends to itself alone (a row that attends to
    nothing would make the attention's softmax NaN), and no label."""
    sources = [list(ids) for ids in rows["input_ids"]]
    targets = [list(ids) for ids in rows["labels"]] if "labels" in rows else None
    source_length = max(len(ids) for ids in sources)
    target_length = max(len(ids) for ids in targets) if targets is not None else 0
    masks = [[1] * len(ids) for ids in sources]
    if shapes is not None:
        source_length = shapes.length(source_length)
        target_length = shapes.length(target_length) if targets is not None else 0
        filler = shapes.rows(len(sources), max(source_length, target_length)) - len(sources)
        sources += [[pad_token_id]] * filler
        masks += [[1]] * filler
        targets = targets + [[]] * filler if targets is not None else None
    batch = {"input_ids": _pad(sources, pad_token_id, source_length), "attention_mask": _pad(masks, 0, source_length)}
    if targets is not None:
        batch["labels"] = _pad(targets, -100, target_length)
    return batch


def token_counts(rows: dict[str, list]) -> tuple[int, int]:
    """The source and the target tokens of a batch's pairs, counted on the host before they are padded (reading
    them off the padded tensors on the GPU would make the host wait for it)."""
    return sum(map(len, rows["input_ids"])), sum(map(len, rows["labels"]))


def _pad(sequences: list[list[int]], value: int, length: int | None = None) -> torch.Tensor:
    """`sequences` right-padded with `value` to `length` (default: the longest)."""
    length = length if length is not None else max(len(sequence) for sequence in sequences)
    return torch.tensor([list(sequence) + [value] * (length - len(sequence)) for sequence in sequences])


__all__ = [
    "BatchShapes",
    "CollatingDataset",
    "StreamBatch",
    "TokenBudgetBatches",
    "UpdateSplit",
    "collate",
    "evaluation_batches",
    "generation_shards",
    "micro_batches_per_update",
    "share_length",
    "token_counts",
    "update_split",
]
