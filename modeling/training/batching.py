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
"""

from collections.abc import Callable, Iterator, Sequence

import numpy as np
import torch


def pack_by_tokens(order: Sequence[int], source_lengths, target_lengths, max_tokens: int) -> list[list[int]]:
    """Cut `order` (already sorted by length) into consecutive batches whose padded size, the longest source or
    target times the number of pairs, stays within `max_tokens` on each side."""
    batches, batch, longest_source, longest_target = [], [], 0, 0
    for index in order:
        source, target = int(source_lengths[index]), int(target_lengths[index])
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
    ):
        """`epoch_lengths(epoch)`, when given, gives the pairs' lengths of that epoch, which then replace the fixed
        `source_lengths` and `target_lengths` (BPE-dropout segments the pairs anew every epoch)."""
        self.epoch_lengths = epoch_lengths
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
        batches = pack_by_tokens(order, source_lengths, target_lengths, self.max_tokens)
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
    batches = pack_by_tokens(order, source_lengths, target_lengths, max_tokens)
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


def collate(rows: dict[str, list], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-pad a batch of tokenized pairs: `input_ids` and `attention_mask`, and `labels` with -100 on padding
    (left out of the loss)."""
    batch = {"input_ids": pad(rows["input_ids"], pad_token_id)}
    batch["attention_mask"] = pad([[1] * len(ids) for ids in rows["input_ids"]], 0)
    if "labels" in rows:
        batch["labels"] = pad(rows["labels"], -100)
    return batch


def pad(sequences: list[list[int]], value: int) -> torch.Tensor:
    longest = max(len(sequence) for sequence in sequences)
    return torch.tensor([list(sequence) + [value] * (longest - len(sequence)) for sequence in sequences])
