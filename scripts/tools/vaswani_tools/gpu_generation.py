"""The generation part of the GPU suite (vaswani_tools.gpu_suite): this project's `generate` on the shipped en->de model
against CTranslate2 on the same device, greedy and beam 4, over Multi30k's validation captions in batches of 64.

Both decode with the model's generation config (its length limit and length penalty; beam search stops as
CTranslate2's does, `early_stopping=True`, as the CPU serving table's rows: vaswani_tools.benchmarking), ours in bf16 on
a GPU, CTranslate2 in float16 (`compute_type`), the weights exported once in float32. Each row times every batch once
after one untimed batch (the first call's set-up), the device synchronized before the clock stops; the outputs are
compared afterwards, token for token: a CTranslate2 row counts the captions whose tokens are ours (`same_as_vaswani`)
and gives CTranslate2's seconds over ours (`vaswani_speed_ratio`: 1.0 or more where ours is as fast).

A row that cannot run is a row with its error: CTranslate2's CUDA build loads CUDA 12's cuBLAS (libcublas.so.12), which
a machine of CUDA 13 alone does not have, and a wheel of it (581 MB) does not fit a device call (64 MiB). The dry run
decodes a few captions on the CPU in float32, CTranslate2 included, so that the part cannot rot between lent GPUs.
"""

import json
import time
from dataclasses import dataclass
from pathlib import Path

import torch

MODEL = Path("results") / "multi30k_en_de" / "model"  # in the checkout
BEAMS = (1, 4)


@dataclass(frozen=True)
class GenerationSizes:
    captions: int  # Multi30k's validation captions, repeated in order where the file has fewer
    batch_size: int
    max_new_tokens: int | None  # None: the model's generation config's


def captions(validation_file: Path, count: int) -> list[str]:
    """The first `count` English captions of the validation file, the file read again from its start as often as
    needed (1,014 captions: 2,048 are the file twice, then its first 20)."""
    with validation_file.open(encoding="utf-8") as lines:
        texts = [json.loads(line)["en"] for line in lines if line.strip()]
    if not texts:
        raise ValueError(f"{validation_file} holds no captions")
    return [texts[index % len(texts)] for index in range(count)]


def decoding_settings(generation_config, num_beams: int, max_new_tokens: int | None) -> dict:
    """`generate`'s settings of a row: the model's length limit (or `max_new_tokens`), its length penalty and n-gram
    rule, and with beams `early_stopping=True`, the rule CTranslate2's search follows."""
    settings = {"num_beams": num_beams, "do_sample": False,
                "max_new_tokens": max_new_tokens or generation_config.max_new_tokens}
    if generation_config.no_repeat_ngram_size:
        settings["no_repeat_ngram_size"] = generation_config.no_repeat_ngram_size
    if num_beams > 1:
        settings.update(length_penalty=generation_config.length_penalty, early_stopping=True)
    return settings


def generation_worker(sizes: GenerationSizes, validation_file: Path, model_dir: Path, work_dir: Path, write) -> None:
    """Measure the part's rows, each given to `write` as soon as it is measured (the part's time limit may stop this
    process before the last): ours greedy and beam 4, then CTranslate2's."""
    from transformers import AutoTokenizer, GenerationConfig

    device = "cuda" if torch.cuda.is_available() else "cpu"
    texts = captions(validation_file, sizes.captions)
    batches = [texts[start : start + sizes.batch_size] for start in range(0, len(texts), sizes.batch_size)]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    generation_config = GenerationConfig.from_pretrained(model_dir)
    ours = {}
    for beams in BEAMS:
        settings = decoding_settings(generation_config, beams, sizes.max_new_tokens)
        row = {"engine": "vaswani", "precision": "bf16" if device == "cuda" else "fp32", "num_beams": beams,
               "captions": len(texts), "batch_size": sizes.batch_size}
        try:
            seconds, outputs = _vaswani(model_dir, tokenizer, batches, settings, device)
        except Exception as error:  # noqa: BLE001 - reported; the other rows stand without it
            write({**row, **_no_numbers(), "error": f"{type(error).__name__}: {error}"})
            continue
        ours[beams] = (seconds, outputs)
        write({**row, **_numbers(seconds, outputs), "same_as_vaswani": None, "vaswani_speed_ratio": None,
               "error": None})
    for beams in BEAMS:
        settings = decoding_settings(generation_config, beams, sizes.max_new_tokens)
        row = {"engine": "ctranslate2", "precision": "float16" if device == "cuda" else "float32",
               "num_beams": beams, "captions": len(texts), "batch_size": sizes.batch_size}
        try:
            seconds, outputs = _ctranslate2(model_dir, tokenizer, batches, settings, device, work_dir)
        except Exception as error:  # noqa: BLE001 - CTranslate2 missing, or without CUDA: the row says so
            write({**row, **_no_numbers(), "error": f"{type(error).__name__}: {error}"})
            continue
        numbers = _numbers(seconds, outputs)
        same = ratio = None
        if beams in ours:
            our_seconds, our_outputs = ours[beams]
            same, ratio = sum(a == b for a, b in zip(outputs, our_outputs)), seconds / our_seconds
        write({**row, **numbers, "same_as_vaswani": same, "vaswani_speed_ratio": ratio, "error": None})


def _numbers(seconds: float, outputs: list[list[int]]) -> dict:
    tokens = sum(len(output) for output in outputs)
    return {"seconds": seconds, "captions_per_s": len(outputs) / seconds, "tokens_per_s": tokens / seconds,
            "generated_tokens": tokens}


def _no_numbers() -> dict:
    return {"seconds": None, "captions_per_s": None, "tokens_per_s": None, "generated_tokens": None,
            "same_as_vaswani": None, "vaswani_speed_ratio": None}


def _synchronize(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _vaswani(model_dir: Path, tokenizer, batches: list[list[str]], settings: dict, device: str):
    """Seconds to decode every batch with `generate`, and each caption's new tokens up to its end token."""
    from vaswani import VaswaniForConditionalGeneration

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = VaswaniForConditionalGeneration.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    inputs = [{key: value.to(device) for key, value in
               tokenizer(batch, return_tensors="pt", padding=True, truncation=True).items()
               if key in ("input_ids", "attention_mask")} for batch in batches]
    with torch.inference_mode():
        model.generate(**inputs[0], **settings)  # the first call's set-up, untimed
        _synchronize(device)
        started = time.perf_counter()
        outputs = [model.generate(**batch, **settings) for batch in inputs]
        _synchronize(device)
        seconds = time.perf_counter() - started
    eos = model.generation_config.eos_token_id
    return seconds, [_until_end(row, eos) for output in outputs for row in output[:, 1:].tolist()]


def _until_end(row: list[int], eos: int) -> list[int]:
    return row[: row.index(eos)] if eos in row else row


def _ctranslate2(model_dir: Path, tokenizer, batches: list[list[str]], settings: dict, device: str, work_dir: Path):
    """Seconds to decode every batch with CTranslate2's `translate_batch`, and each caption's tokens (its best
    hypothesis) as ids of the model's vocabulary."""
    from transformers import GenerationConfig

    from vaswani.serving.ctranslate2_export import export_to_ctranslate2, translate_options

    import ctranslate2

    folder = work_dir / "ctranslate2"
    if not folder.is_dir():
        export_to_ctranslate2(model_dir, folder)
    translator = ctranslate2.Translator(str(folder), device=device,
                                        compute_type="float16" if device == "cuda" else "float32")
    sources = [[tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(batch, truncation=True)["input_ids"]]
               for batch in batches]
    options = translate_options(GenerationConfig(**settings))
    translator.translate_batch(sources[0], max_batch_size=len(sources[0]), **options)  # untimed, as ours
    started = time.perf_counter()
    results = [translator.translate_batch(batch, max_batch_size=len(batch), **options) for batch in sources]
    seconds = time.perf_counter() - started
    return seconds, [tokenizer.convert_tokens_to_ids(result.hypotheses[0]) for batch in results for result in batch]


__all__ = ["BEAMS", "MODEL", "GenerationSizes", "captions", "decoding_settings", "generation_worker"]
