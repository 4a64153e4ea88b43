"""Cutting a corpus into windows and a window into batches, as CTranslate2's `translate_iterable` and fairseq's
`--max-tokens` do: a window of examples is read (`windows`), sorted by length, longest first, and cut into batches of
at most `batch_size` examples and `max_tokens` padded input tokens (`plan_batches`); each batch holds inputs of about
one length, so little of it is padding, and the longest come first, so that a batch too large for memory fails at the
start and the last batches, which run while other workers may already be idle, are the shortest. The outputs are put
back in input order (`in_input_order`).

A window's batches depend only on its texts and these settings, never on the number of processes or workers: every
batch is decoded alike wherever it runs, so one process and several write the same bytes.
"""

from collections.abc import Iterable, Iterator, Sequence
from itertools import islice


def windows(examples: Iterable[str], size: int) -> Iterator[list[str]]:
    """The examples `size` at a time (the last window may be shorter)."""
    examples = iter(examples)
    while window := list(islice(examples, size)):
        yield window


def plan_batches(lengths: Sequence[int], batch_size: int, max_tokens: int | None = None) -> list[list[int]]:
    """The positions of a window's examples, longest first (ties in input order), cut into batches of at most
    `batch_size` examples whose rows, padded to the batch's longest, hold at most `max_tokens` tokens (a single
    example longer than that is a batch of its own)."""
    order = sorted(range(len(lengths)), key=lambda position: -lengths[position])
    batches, current, longest = [], [], 0
    for position in order:
        length = max(lengths[position], 1)
        widest = max(longest, length)
        if current and (len(current) >= batch_size or (max_tokens and widest * (len(current) + 1) > max_tokens)):
            batches.append(current)
            current, widest = [], length
        current.append(position)
        longest = widest
    if current:
        batches.append(current)
    return batches


def in_input_order(batches: Sequence[Sequence[int]], outputs: Sequence[Sequence[str]], size: int) -> list[str]:
    """The outputs of `batches` (each a list of positions) put back at their positions of a window of `size`."""
    ordered = [""] * size
    for positions, batch_outputs in zip(batches, outputs):
        for position, output in zip(positions, batch_outputs):
            ordered[position] = output
    return ordered


__all__ = ["in_input_order", "plan_batches", "windows"]
