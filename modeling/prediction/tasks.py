"""What the corpus command runs on a batch of texts, for each task: the checkpoint's pipeline (the package's, as
`vaswani.pipelines.pipeline` builds it), called on the batch with the command's settings, and each result written as
one line.

    translation, summarization   text: the output text; jsonl: {"translation_text": ..., "score": ...} (a list of
                                 such records, best first, with --num_return_sequences > 1)
    text-classification          text: the label; jsonl: {"label": ..., "score": ...}
    token-classification         jsonl: the entities, as the pipeline gives them ([{"entity_group", "score", "word",
                                 "start", "end"}, ...]), each an exact span of the input (`text[start:end] == word`)

An empty (or blank) text is not given to the model: its line is empty (text), or an empty output in JSON (`{"..._text":
""}`, `{"label": null, "score": null}`, `[]`). A line break inside an output text is written as a space, so that line N
of the output always answers line N of the input.

A generated output's `score` is its log-probability under the model: the sum of its tokens' log-probabilities, the end
token included, from one forward pass over the output (teacher forcing), whatever the search that found it (greedy or
beam search, whose own score also divides by a power of the length). It is computed only for JSON Lines.
"""

import json
import math
from collections.abc import Sequence

import torch


GENERATION_KEYS = {"translation": "translation_text", "summarization": "summary_text"}
SCORED_LOGITS = 1 << 24  # logits computed at once when scoring outputs (64 MB of floats)


class Predictor:
    """A task's pipeline with the call's settings. `predict(texts)` gives one output line (without its line break) per
    text; `lengths(texts)` the token count of each, as the model would read it (before any truncation)."""

    def __init__(self, pipeline, task: str, output_format: str, options: dict):
        self.pipeline, self.task, self.output_format = pipeline, task, output_format
        self.options = dict(options)  # the pipeline's call arguments: decoding settings, aggregation

    @property
    def tokenizer(self):
        return self.pipeline.tokenizer

    @property
    def max_source_tokens(self) -> int:
        """The most tokens of a text the model reads (the pipeline cuts a longer one)."""
        limits = [getattr(self.pipeline.model.config, "max_position_embeddings", None),
                  getattr(self.tokenizer, "model_max_length", None)]
        return min(limit for limit in limits if isinstance(limit, int) and limit > 0)

    def lengths(self, texts: Sequence[str]) -> list[int]:
        return [len(ids) for ids in self.tokenizer(list(texts), add_special_tokens=True)["input_ids"]]

    def predict(self, texts: Sequence[str]) -> list[str]:
        texts = list(texts)
        asked = [position for position, text in enumerate(texts) if text.strip()]
        lines = [self._empty_line()] * len(texts)
        if not asked:
            return lines
        inputs = [texts[position] for position in asked]
        if self.task in GENERATION_KEYS:
            answers = self._generate(inputs)
        elif self.task == "text-classification":
            answers = [self._label_line(result) for result in self.pipeline(inputs, batch_size=len(inputs),
                                                                            truncation=True)]
        else:
            answers = [json.dumps([_plain(entity) for entity in entities], ensure_ascii=False)
                       for entities in self.pipeline(inputs, batch_size=len(inputs), **self.options)]
        for position, line in zip(asked, answers):
            lines[position] = line
        return lines

    # --- the tasks -------------------------------------------------------------------------------------------------

    def _generate(self, texts: list[str]) -> list[str]:
        key = GENERATION_KEYS[self.task]
        scored = self.output_format == "jsonl"
        results = self.pipeline(texts, batch_size=len(texts), return_tensors=scored, return_text=True, **self.options)
        results = [result if isinstance(result, list) else [result] for result in results]
        if not scored:
            return [one_line(outputs[0][key]) for outputs in results]
        scores = self._scores(texts, [[output[f"{key[:-5]}_token_ids"] for output in outputs] for outputs in results])
        lines = []
        for outputs, output_scores in zip(results, scores):
            records = [{key: output[key], "score": score} for output, score in zip(outputs, output_scores)]
            lines.append(json.dumps(records[0] if len(records) == 1 else records, ensure_ascii=False))
        return lines

    def _label_line(self, result) -> str:
        result = result[0] if isinstance(result, list) else result
        if self.output_format == "jsonl":
            return json.dumps({"label": result["label"], "score": float(result["score"])}, ensure_ascii=False)
        return one_line(str(result["label"]))

    def _empty_line(self) -> str:
        if self.output_format == "text":
            return ""
        if self.task in GENERATION_KEYS:
            return json.dumps({GENERATION_KEYS[self.task]: "", "score": None})
        return json.dumps({"label": None, "score": None}) if self.task == "text-classification" else "[]"

    @torch.inference_mode()
    def _scores(self, texts: list[str], outputs: list[list[torch.Tensor]]) -> list[list[float]]:
        """The log-probability of each output of each text (see the module's docstring)."""
        pipeline, model = self.pipeline, self.pipeline.model
        preprocess = pipeline._sanitize_parameters(**self.options)[0]  # the pipeline's own encoding of a text
        sources = [pipeline.preprocess(text, **preprocess)["input_ids"][0] for text in texts]
        rows = [(source, ids) for source, ids_of_text in zip(sources, outputs) for ids in ids_of_text]
        pad = model.config.pad_token_id if model.config.pad_token_id is not None else 0
        scores, start = [], 0
        while start < len(rows):
            longest = max(len(ids) for _, ids in rows[start:])
            count = max(1, SCORED_LOGITS // (longest * model.config.vocab_size))
            chunk, start = rows[start : start + count], start + count
            source = _padded([source for source, _ in chunk], pad)
            target = _padded([ids for _, ids in chunk], pad)
            logits = model(input_ids=source.to(model.device), attention_mask=_mask(chunk, 0).to(model.device),
                           decoder_input_ids=target[:, :-1].to(model.device),
                           decoder_attention_mask=_mask(chunk, 1)[:, :-1].to(model.device)).logits.float()
            chosen = logits.log_softmax(-1).gather(-1, target[:, 1:, None].to(logits.device))[..., 0]
            scores += (chosen * _mask(chunk, 1)[:, 1:].to(chosen.device)).sum(-1).tolist()
        per_text, position = [], 0
        for ids_of_text in outputs:
            per_text.append([_finite(score) for score in scores[position : position + len(ids_of_text)]])
            position += len(ids_of_text)
        return per_text


def _padded(rows: list[torch.Tensor], pad: int) -> torch.Tensor:
    batch = torch.full((len(rows), max(len(row) for row in rows)), pad, dtype=torch.long)
    for index, row in enumerate(rows):
        batch[index, : len(row)] = row
    return batch


def _mask(chunk: list[tuple[torch.Tensor, torch.Tensor]], part: int) -> torch.Tensor:
    """1 at the real tokens of the sources (`part` 0) or the outputs (1) of `chunk`, padded."""
    rows = [pair[part] for pair in chunk]
    mask = torch.zeros((len(rows), max(len(row) for row in rows)), dtype=torch.long)
    for index, row in enumerate(rows):
        mask[index, : len(row)] = 1
    return mask


def _finite(score: float) -> float | None:
    return score if math.isfinite(score) else None


def _plain(entity: dict) -> dict:
    """An entity of the pipeline with numpy numbers as Python's (JSON)."""
    return {key: (value.item() if hasattr(value, "item") else value) for key, value in entity.items()}


def one_line(text: str) -> str:
    """`text` with its line breaks written as spaces (one output line per input line)."""
    return " ".join(text.splitlines())


__all__ = ["GENERATION_KEYS", "Predictor", "one_line"]
