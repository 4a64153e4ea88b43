"""Greedy and beam search as transformers' `generate` runs them, over any decoder that gives the next token's logits.

Two decoders use it: `vaswani.cpu_decoding` (the CPU decoder `generate` runs on a CPU, on the model's weights) and
`vaswani.serving.onnx_generation.OnnxGenerator` (the exported graphs in onnxruntime). Both give the tokens of `generate`
with the same settings, because the search is the one transformers 5 runs (`GenerationMixin._sample` without sampling,
and the vectorized `GenerationMixin._beam_search`), step for step:

  * greedy: the highest-scoring token (the first of equal ones); an input that has produced an end-of-sequence token
    is padded with `pad_token_id` from then on; decoding stops when every input has ended or at `max_length`;
  * beam search: at each step the `max(2, 1 + #eos) * num_beams` best continuations of an input over all its beams
    (log-softmax plus the beam's score); those ending in an end-of-sequence token (or reaching `max_length`) are
    candidates for the finished list, scored by their sum divided by `length ** length_penalty`, if they are among
    the first `num_beams`; the best `num_beams` others continue. An input is over when its finished list is full and
    no running beam can still beat it (transformers' heuristic for `early_stopping=False`, the bound at `max_length`
    for `"never"`), or, with `early_stopping=True`, as soon as its list is full. The outputs are the best finished
    hypotheses, padded with `pad_token_id or eos_token_id` (transformers' fill value, which is the EOS token where
    the pad id is 0) to the longest returned;
  * the logits processors these models' generation configs use: `no_repeat_ngram_size` (a token that would complete
    an n-gram already in the output gets -inf), `min_length` / `min_new_tokens` (EOS gets -inf until then).

Anything else `generate` can do (sampling, other processors, scores in the output) is not here: the callers fall back
to `generate` itself for it.

One difference in the work, none in the tokens: an input whose search is over leaves the batch at once (the decoder is
told through `keep`), where `generate` keeps computing it until the last input is done; each input's search depends
on its own rows only, so the others' tokens do not change.

A decoder is anything with two methods:

    step(tokens)        the last token of each row (rows,) -> the next token's logits (rows, vocab), float32;
                        the decoder remembers what it was fed before (its cache). A decoder whose
                        `first_step_per_input` is True is fed one row per input at beam search's first step (the
                        beams are all alike then; their logits would be the same)
    keep(rows, inputs)  go on with these rows: `rows` are indices into the current rows, in their new order (beam
                        search picks and reorders beams; an input that is over is left out); `inputs`, where the set
                        of inputs changes, the indices of the inputs kept (each input's rows stay together, in
                        `num_beams` rows), else None

This file is copied into every saved model, beside cpu_decoding.py: it imports only torch.
"""

from dataclasses import dataclass

import torch


# transformers' beam search adds this to a score to rule a candidate out (kept identical: it decides ties the same way)
EXCLUDED = -1.0e9


@dataclass(frozen=True)
class SearchSettings:
    """What the search needs of a generation config, lengths counted as `generate` counts them: the output includes
    the decoder start token."""

    max_length: int
    eos_token_ids: tuple[int, ...] = ()
    pad_token_id: int | None = None
    num_beams: int = 1
    length_penalty: float = 1.0
    early_stopping: bool | str = False
    num_return_sequences: int = 1
    no_repeat_ngram_size: int = 0
    min_length: int = 0  # the end-of-sequence tokens are ruled out while the output is shorter

    def __post_init__(self):
        if self.num_beams < 1 or not 1 <= self.num_return_sequences <= self.num_beams:
            raise ValueError(
                f"num_beams={self.num_beams}, num_return_sequences={self.num_return_sequences}: num_beams must be 1 "
                "or more, and num_return_sequences from 1 to num_beams."
            )
        if self.max_length < 2:
            raise ValueError(f"max_length={self.max_length}: the output needs room for at least one new token.")


def search(decoder, batch_size: int, start_token_id: int, settings: SearchSettings) -> torch.Tensor:
    """Greedy search (num_beams 1) or beam search for `batch_size` inputs, the decoder holding `num_beams` rows per
    input (all alike at the start): the output ids (batch_size * num_return_sequences, length), starting with
    `start_token_id`, as `generate` returns them."""
    if settings.num_beams == 1:
        return greedy_search(decoder, batch_size, start_token_id, settings)
    return beam_search(decoder, batch_size, start_token_id, settings)


def rule_out_tokens(scores: torch.Tensor, history: torch.Tensor, settings: SearchSettings) -> None:
    """Set to -inf, in place, the scores (rows, vocab) of the tokens `generate`'s processors rule out after `history`
    (rows, length so far): the end-of-sequence tokens below `min_length`, and with `no_repeat_ngram_size` n, every token
    that would complete an n-gram already in the history (the history's last n - 1 tokens followed by it)."""
    length = history.shape[1]
    if length < settings.min_length and settings.eos_token_ids:
        scores[:, list(settings.eos_token_ids)] = -float("inf")
    n = settings.no_repeat_ngram_size
    if n and length >= n:
        last = history[:, length + 1 - n :]
        windows = history.unfold(1, n, 1)  # every n-gram of the history
        repeated = (windows[..., :-1] == last[:, None, :]).all(-1)
        rows, starts = repeated.nonzero(as_tuple=True)
        scores[rows, windows[rows, starts, -1]] = -float("inf")


# the vocabulary is scanned in blocks of this many scores, or of half as many where it is not a whole number of them:
# one vectorized pass gives every block's maximum (256 rows of 8,000 log-probabilities, one thread on a 2-core EPYC:
# 0.25 ms in blocks of 64, 0.41 in blocks of 32)
BLOCK = 64


def _block_maxima(scores: torch.Tensor) -> tuple[torch.Tensor, int] | tuple[None, None]:
    """The maximum of each block of scores along the last dimension (rows, vocab // block) and the block size
    (`BLOCK`, else `BLOCK // 2`), or None, None where the vocabulary is not a whole number of blocks or too small for
    blocks to pay."""
    vocab = scores.shape[-1]
    for block in (BLOCK, BLOCK // 2):
        if vocab % block == 0 and vocab >= 16 * block:
            return scores.view(scores.shape[0], vocab // block, block).amax(-1), block
    return None, None


def first_argmax(scores: torch.Tensor) -> torch.Tensor:
    """`scores.argmax(-1)`: the first of equal maxima. torch's CPU argmax compares the vocabulary one element at a
    time (2.7 ms for 64 rows of 8,000 logits, one thread); here one vectorized pass finds each block's maximum, then
    the first block holding the row's maximum, then the first maximum in that block (blocks of 64: 0.16 ms; of 32,
    where the vocabulary is not a whole number of 64s: 0.22 ms)."""
    maxima, block = _block_maxima(scores)
    if maxima is None:
        return scores.argmax(-1)
    rows = torch.arange(scores.shape[0])
    chosen = maxima.argmax(-1)  # the first block holding the maximum (a short row: cheap)
    within = scores.view(scores.shape[0], -1, block)[rows, chosen].argmax(-1)
    return chosen * block + within


def beam_candidates(logits: torch.Tensor, beam_scores: torch.Tensor, count: int, rule_out=None):
    """The `count` best continuations of each input over all its beams, as transformers' beam search finds them:
    `topk` over each input's (beams * vocab) scores `log_softmax(logits)` (after `rule_out(log_probs)`: the logits
    processors) plus the beam's score. `logits` (inputs * beams, vocab), `beam_scores` (inputs, beams). Returns the
    scores (inputs, count), best first, and their indices into the (beams * vocab) row: beam = index // vocab,
    token = index % vocab.

    The log-probabilities are torch's `log_softmax` of the whole matrix, as transformers computes them (one fused
    pass per row: 1.9 ms for 256 rows of 8,000 logits on a 2-core EPYC, one thread, where shifting, exponentiating
    and summing the rows in separate passes took 2.9). A score is a log-probability plus its beam's score, so a
    block of log-probabilities (`_block_maxima`) has its best score at its maximum, and the best `count` scores lie in
    the `count` blocks with the best maxima: only those blocks are scored. torch's top-k is also several times faster
    over one input's beams at once (4 x 125 block maxima) than over each beam's row."""
    rows, vocab = logits.shape
    inputs, beams = beam_scores.shape
    log_probs = torch.log_softmax(logits, dim=-1)
    if rule_out is not None:
        rule_out(log_probs)  # -inf where a processor rules a token out (they run on the log-probabilities)
    offsets = beam_scores.reshape(rows, 1)
    blocks, block = _block_maxima(log_probs)
    if blocks is None or blocks.shape[1] * beams < 4 * count:
        return (log_probs + offsets).view(inputs, beams * vocab).topk(count)
    per_row = blocks.shape[1]  # vocab = per_row * block: block b of beam j starts at index (j * per_row + b) * block
    chosen = (blocks + offsets).view(inputs, beams * per_row).topk(count).indices.sort(-1).values  # in row order,
    # as ties; the chosen blocks among all the rows' blocks (each input's first block is at input * beams * per_row)
    chosen_blocks = (chosen + torch.arange(0, rows * per_row, beams * per_row)[:, None]).view(-1)
    values = log_probs.view(rows * per_row, block).index_select(0, chosen_blocks)
    scores = values + offsets.index_select(0, chosen_blocks // per_row)  # each with its row's beam score
    top_scores, within = scores.view(inputs, count * block).topk(count)
    return top_scores, chosen.gather(1, within // block) * block + within % block


def _ends(tokens: torch.Tensor, eos: torch.Tensor) -> torch.Tensor:
    """Whether each token is an end-of-sequence token (none where `eos` is empty): one comparison for the usual single
    end token, `isin` for several."""
    return tokens == eos[0] if len(eos) == 1 else torch.isin(tokens, eos)


def greedy_search(decoder, batch_size: int, start_token_id: int, settings: SearchSettings) -> torch.Tensor:
    """The highest-scoring token at every step; an input that has ended leaves the batch (its row is padded)."""
    eos = torch.tensor(settings.eos_token_ids, dtype=torch.long)
    fill = settings.pad_token_id if settings.pad_token_id is not None else -1
    output = torch.full((batch_size, settings.max_length), fill, dtype=torch.long)
    output[:, 0] = start_token_id
    rows = torch.arange(batch_size)  # the output row of each row the decoder holds
    tokens, length = output[:, 0].clone(), 1
    while length < settings.max_length:
        scores = decoder.step(tokens)
        if settings.min_length > length or settings.no_repeat_ngram_size:
            rule_out_tokens(scores, output[rows, :length], settings)
        tokens = first_argmax(scores)
        output[rows, length] = tokens
        length += 1
        if not len(eos):
            continue
        ended = _ends(tokens, eos)
        if ended.all():
            break
        if ended.any():
            kept = (~ended).nonzero().squeeze(1)
            rows, tokens = rows[kept], tokens[kept]
            decoder.keep(kept, kept)
    return output[:, :length]


@dataclass
class BeamState:
    """The beam search of the inputs still running, (inputs, ...) each: the running beams and the finished list."""

    items: torch.Tensor  # (inputs,) the output index of each input
    running: torch.Tensor  # (inputs, num_beams, max_length) token ids
    running_scores: torch.Tensor  # (inputs, num_beams) sums of log-probabilities
    finished: torch.Tensor  # (inputs, num_beams, max_length) the best hypotheses that ended
    finished_scores: torch.Tensor  # (inputs, num_beams) their scores with the length penalty (EXCLUDED: none yet)
    finished_flags: torch.Tensor  # (inputs, num_beams) bool
    finished_lengths: torch.Tensor  # (inputs, num_beams) new tokens of each hypothesis (0: none yet)
    can_improve: torch.Tensor  # (inputs,) bool: transformers' early-stop heuristic not yet satisfied

    def select(self, kept: torch.Tensor) -> "BeamState":
        return BeamState(*(getattr(self, name)[kept] for name in self.__dataclass_fields__))


def _along_beams(tensor: torch.Tensor, indices: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """Token histories `tensor` (inputs, width, length) gathered along their second dimension by `indices` (inputs, k),
    `offsets` each input's first row (`_first_rows(inputs, width)`): one `index_select` of rows (a third of the time of
    `take_along_dim`, which also broadcasts and wraps the indices). Tables of scores and flags take `gather`."""
    inputs, width, length = tensor.shape
    rows = (indices + offsets).view(-1)
    return tensor.reshape(inputs * width, length).index_select(0, rows).view(*indices.shape, length)


def _first_rows(inputs: int, width: int) -> torch.Tensor:
    """The first row of each input in an (inputs * width) layout, (inputs, 1)."""
    return torch.arange(0, inputs * width, width)[:, None]


def beam_search(decoder, batch_size: int, start_token_id: int, settings: SearchSettings) -> torch.Tensor:
    """transformers' beam search (see the module docstring), an input leaving the batch when it is over."""
    beams, max_length = settings.num_beams, settings.max_length
    eos = torch.tensor(settings.eos_token_ids, dtype=torch.long)
    keep_count = max(2, 1 + len(eos)) * beams
    top_beams = torch.arange(keep_count) < beams
    pad = settings.pad_token_id
    fill = (pad or settings.eos_token_ids[0]) if settings.eos_token_ids else -1  # transformers' `pad or eos[0]`
    running = torch.full((batch_size, beams, max_length), fill, dtype=torch.long)
    running[:, :, 0] = start_token_id
    running_scores = torch.zeros(batch_size, beams)
    running_scores[:, 1:] = EXCLUDED  # the beams start alike: only the first one's continuations count
    state = BeamState(
        items=torch.arange(batch_size),
        running=running,
        running_scores=running_scores,
        finished=running.clone(),
        finished_scores=torch.full((batch_size, beams), EXCLUDED),
        finished_flags=torch.zeros(batch_size, beams, dtype=torch.bool),
        finished_lengths=torch.zeros(batch_size, beams, dtype=torch.long),
        can_improve=torch.ones(batch_size, dtype=torch.bool),
    )
    outputs = torch.full((batch_size, settings.num_return_sequences, max_length), fill, dtype=torch.long)
    output_lengths = torch.zeros(batch_size, settings.num_return_sequences, dtype=torch.long)
    stops_when_full = settings.early_stopping is True
    offsets = None  # each running input's first row in the layouts of each width (`_first_rows`)
    length = 1
    while True:
        inputs = state.items.shape[0]
        if offsets is None or offsets[beams].shape[0] != inputs:  # (new only where inputs left)
            offsets = {width: _first_rows(inputs, width) for width in (beams, keep_count, beams + keep_count)}
        # the beams are alike at the first step: a decoder that can gives that step one row per input
        fed = 1 if length == 1 and getattr(decoder, "first_step_per_input", False) else beams
        rule_out = None
        if settings.min_length > length or settings.no_repeat_ngram_size:
            history = state.running[:, :fed, :length].reshape(inputs * fed, length)
            rule_out = lambda scores: rule_out_tokens(scores, history, settings)  # noqa: E731
        logits = decoder.step(state.running[:, :fed, length - 1].reshape(-1))
        # the best `keep_count` continuations of each input over its beams
        top_scores, top_indices = beam_candidates(logits, state.running_scores[:, :fed], keep_count, rule_out)
        vocab = logits.shape[1]
        origins, tokens = top_indices // vocab, top_indices % vocab
        candidates = _along_beams(state.running, origins, offsets[beams])
        candidates[:, :, length] = tokens
        ends = torch.ones_like(tokens, dtype=torch.bool) if length + 1 >= max_length else _ends(tokens, eos)

        # the best beams that go on (a score plus EXCLUDED times a flag: the same sums as transformers')
        going_on_scores = torch.add(top_scores, ends, alpha=EXCLUDED)
        chosen = going_on_scores.topk(beams).indices
        state.running = _along_beams(candidates, chosen, offsets[keep_count])
        state.running_scores = going_on_scores.gather(1, chosen)
        origins = origins.gather(1, chosen)

        # the finished list takes the hypotheses that ended among the first `beams`, if they beat it; a candidate has
        # `length` new tokens (the decoder start token is not counted)
        just_ended = ends & top_beams[None, :]
        ended_scores = top_scores / (length**settings.length_penalty)
        if stops_when_full:  # (adding EXCLUDED times 0 changes no score: skipped where it is always 0)
            ended_scores.add_(state.finished_flags.all(-1, keepdim=True), alpha=EXCLUDED)
        ended_scores.add_(~state.can_improve[:, None], alpha=EXCLUDED)
        ended_scores.add_(~just_ended, alpha=EXCLUDED)
        merged_scores = torch.cat((state.finished_scores, ended_scores), dim=1)
        best = merged_scores.topk(beams).indices
        state.finished = _along_beams(torch.cat((state.finished, candidates), dim=1), best, offsets[beams + keep_count])
        state.finished_scores = merged_scores.gather(1, best)
        state.finished_flags = torch.cat((state.finished_flags, just_ended), dim=1).gather(1, best)
        new_lengths = torch.full_like(tokens, length)
        state.finished_lengths = torch.cat((state.finished_lengths, new_lengths), dim=1).gather(1, best)
        length += 1

        # can a running beam still beat the worst finished hypothesis?
        if settings.early_stopping == "never" and settings.length_penalty > 0.0:
            best_length = max_length - 1
        else:
            best_length = length - 1
        best_possible = state.running_scores[:, :1] / (best_length**settings.length_penalty)
        worst = torch.where(state.finished_flags, state.finished_scores.min(dim=1, keepdim=True)[0], EXCLUDED)
        state.can_improve = state.can_improve & (best_possible > worst).any(-1)

        over = ~state.can_improve | (state.finished_flags.all(-1) & stops_when_full)
        if ends.all():
            over = torch.ones_like(over)
        if over.any():
            done = over.nonzero().squeeze(1)
            outputs[state.items[done]] = state.finished[done, : settings.num_return_sequences]
            output_lengths[state.items[done]] = state.finished_lengths[done, : settings.num_return_sequences]
            if over.all():
                break
            kept = (~over).nonzero().squeeze(1)
            state = state.select(kept)
            rows = (kept[:, None] * beams + origins[kept]).view(-1)
            decoder.keep(rows, kept)
        else:
            decoder.keep((offsets[beams] + origins).view(-1), None)
    output_length = 1 + int(output_lengths.max())
    return outputs.view(batch_size * settings.num_return_sequences, max_length)[:, :output_length]


__all__ = [
    "SearchSettings",
    "search",
    "greedy_search",
    "beam_search",
    "rule_out_tokens",
    "first_argmax",
    "beam_candidates",
]
