"""vaswani.remote_code.search, the pieces of a search step against the plain computation they replace: greedy's token
against `argmax`, the candidates of beam search against `topk(log_softmax(logits) + beam scores)` over each input's
beams, as transformers computes it."""

import pytest
import torch

from vaswani.remote_code.search import BLOCK, beam_candidates, first_argmax, rule_out_tokens, SearchSettings


def plain_candidates(logits, beam_scores, count, rule_out=None):
    inputs, beams = beam_scores.shape
    log_probs = torch.log_softmax(logits, -1)
    if rule_out is not None:
        rule_out(log_probs)
    return (log_probs + beam_scores.reshape(-1, 1)).view(inputs, -1).topk(count)


@pytest.mark.parametrize("inputs, beams, vocab", [(6, 4, 8000), (1, 4, 8000), (3, 5, 1024), (3, 4, 8032), (2, 3, 1000),
                                                  (4, 2, 64)])
def test_beam_candidates_are_the_best_scores_over_each_inputs_beams(inputs, beams, vocab):
    # vocabularies in whole blocks of 64, of 32 only (8,032) and neither (1,000), large and too small for blocks;
    # peaked rows, as a model's
    generator = torch.Generator().manual_seed(inputs * vocab + beams)
    logits = torch.randn(inputs * beams, vocab, generator=generator) * 4
    logits[:, :50] += 6  # most of the probability in the first blocks
    beam_scores = -10 * torch.rand(inputs, beams, generator=generator)
    count = 2 * beams
    expected = plain_candidates(logits.clone(), beam_scores, count)
    scores, indices = beam_candidates(logits.clone(), beam_scores, count)
    assert torch.equal(indices, expected.indices)
    torch.testing.assert_close(scores, expected.values, rtol=0, atol=1e-5)
    assert bool((indices // vocab < beams).all())


def test_beam_candidates_with_beams_ruled_out_and_tokens_ruled_out():
    # the first step: every beam but the first scored EXCLUDED; the repeated n-grams of each row ruled out, among them
    # a block's maximum (the candidate that would win)
    inputs, beams, vocab = 3, 4, 4096
    generator = torch.Generator().manual_seed(7)
    logits = torch.randn(inputs * beams, vocab, generator=generator) * 3
    best = logits.argmax(-1)
    history = torch.stack([torch.tensor([5, int(token), 5]) for token in best])  # 5 -> best already seen: ruled out
    settings = SearchSettings(max_length=10, no_repeat_ngram_size=2)
    beam_scores = torch.zeros(inputs, beams)
    beam_scores[:, 1:] = -1.0e9
    count = 2 * beams

    def rule_out(scores):
        rule_out_tokens(scores, history, settings)

    expected = plain_candidates(logits.clone(), beam_scores, count, rule_out)
    scores, indices = beam_candidates(logits.clone(), beam_scores, count, rule_out)
    assert torch.equal(indices, expected.indices)
    torch.testing.assert_close(scores, expected.values, rtol=0, atol=1e-5)
    assert bool((indices < vocab).all())  # the first beam's continuations only
    assert not bool((indices % vocab == best[::beams, None]).any())  # the ruled-out best tokens are not candidates
    assert vocab % BLOCK == 0  # the block path of the larger blocks, not the plain one


@pytest.mark.parametrize("vocab", [8000, 8032, 1000, 100])  # blocks of 64, of 32 only, neither, too small
def test_first_argmax_is_argmax_with_ties_to_the_first(vocab):
    generator = torch.Generator().manual_seed(vocab)
    scores = torch.randn(9, vocab, generator=generator)
    top = scores.max() + 1
    scores[0, [7, vocab - 1]] = top  # a tie across blocks
    scores[1, [vocab // 2, vocab // 2 + 1]] = top  # within a block
    scores[2] = -float("inf")  # every token ruled out
    scores[2, vocab - 3] = 0.0
    assert torch.equal(first_argmax(scores), scores.argmax(-1))
    assert first_argmax(scores)[:3].tolist() == [7, vocab // 2, vocab - 3]
