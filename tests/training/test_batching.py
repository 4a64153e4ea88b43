"""vaswani.training.batching: batches under a token budget, bucketed by length, deterministic for a seed, shared
among processes, a batch stream that resumes at a position, and the micro-batches of an update on any number of
processes."""

import pytest
import torch

from vaswani.training.arguments import parse_arguments
from vaswani.training.batching import TokenBudgetBatches, UpdateSplit, update_split

pytestmark = pytest.mark.usefixtures("one_thread")


def lengths(count=500, seed=0):
    generator = torch.Generator().manual_seed(seed)
    source = torch.randint(3, 60, (count,), generator=generator)
    target = (source + torch.randint(-2, 8, (count,), generator=generator)).clamp(min=2)
    return source.tolist(), target.tolist()


def test_batches_respect_the_token_budget_and_hold_every_pair_once():
    source, target = lengths()
    batches = TokenBudgetBatches(source, target, max_tokens=400, seed=0).all_batches(epoch=0)
    for batch in batches:
        assert max(source[i] for i in batch) * len(batch) <= 400
        assert max(target[i] for i in batch) * len(batch) <= 400
    assert sorted(i for batch in batches for i in batch) == list(range(500))
    # length bucketing: far less padding than batches of the same sizes drawn at random
    padding = sum(max(source[i] for i in b) * len(b) - sum(source[i] for i in b) for b in batches) / sum(source)
    assert padding < 0.1


def test_batches_are_deterministic_for_a_seed_and_reshuffled_each_epoch():
    source, target = lengths()
    make = lambda seed: TokenBudgetBatches(source, target, max_tokens=400, seed=seed)  # noqa: E731
    assert make(0).all_batches(0) == make(0).all_batches(0)
    assert make(0).all_batches(0) != make(1).all_batches(0)
    assert make(0).all_batches(0) != make(0).all_batches(1)


def test_processes_get_disjoint_shares_of_equal_length():
    source, target = lengths()
    shares = [TokenBudgetBatches(source, target, 400, seed=0, num_processes=3, process_index=r).batches(0)
              for r in range(3)]
    assert len({len(share) for share in shares}) == 1
    seen = [i for share in shares for batch in share for i in batch]
    assert len(seen) == len(set(seen))
    everything = TokenBudgetBatches(source, target, 400, seed=0).all_batches(0)
    assert len(seen) >= 500 - 2 * max(len(b) for b in everything)  # at most 2 batches left over for 3 processes


def test_the_batch_stream_resumes_at_a_position_across_epochs():
    source, target = lengths(60)
    batches = TokenBudgetBatches(source, target, max_tokens=200, seed=0)
    stream = batches.stream()
    first_pass = [next(stream) for _ in range(len(batches.batches(0)) + 3)]
    assert first_pass[-1][:2] == (1, 2)
    resumed = batches.stream(*batches.next_position(*first_pass[4][:2]))
    assert [next(resumed) for _ in range(len(first_pass) - 5)] == first_pass[5:]


def test_a_pair_longer_than_the_budget_is_refused():
    with pytest.raises(ValueError, match="A pair of 80 tokens does not fit a batch of max_tokens=64"):
        TokenBudgetBatches([80, 3], [5, 4], max_tokens=64, seed=0)
    with pytest.raises(ValueError, match=r"--max_tokens_per_batch \(100\) is smaller than the longest allowed"):
        parse_arguments(["--max_tokens_per_batch", "100", "--max_source_length", "128"])


@pytest.mark.parametrize("processes, exact, split, update", [
    (1, True, UpdateSplit(1, 25_000), 25_000),
    (8, True, UpdateSplit(1, 3_125), 25_000),
    (16, True, UpdateSplit(1, 1_562), 24_992),
    (1, False, UpdateSplit(1, 25_000), 25_000),
    (16, False, UpdateSplit(1, 25_000), 400_000),  # one micro-batch at least: 16 times the target
])
def test_an_update_holds_its_tokens_on_any_number_of_processes_when_exact(processes, exact, split, update):
    assert update_split(25_000, 25_000, processes, exact) == split
    assert split.update_tokens(processes) == update
    # micro-batches of at most 4,096: the fewest that fit, each cut to the update's share
    assert update_split(25_000, 4_096, 1, True) == UpdateSplit(7, 3_571)
    assert update_split(25_000, 4_096, 8, False).update_tokens(8) == 32_768
