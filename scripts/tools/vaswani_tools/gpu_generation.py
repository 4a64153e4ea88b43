"""The generation part of the GPU suite (vaswani_tools.gpu_suite): this project's `generate` on the shipped en->de model
against CTranslate2 on the same device, greedy and beam 4, over Multi30k's validation captions in batches of 64; then
ours again with a static cache and transformers' compiled forward (`vaswani_compiled`: on a GPU inductor's code in
CUDA graphs, `CompileConfig`'s default mode "reduce-overhead", compiled in the row's untimed first call; in the dry
run dynamo's `eager` backend, which captures the same single graph without minutes of code generation on a CPU).

Both decode with the model's generation config (its length limit and length penalty; beam search stops as
CTranslate2's does, `early_stopping=True`, as the CPU serving table's rows: vaswani_tools.benchmarking), ours in bf16 on
a GPU, CTranslate2 in float16 (`compute_type`), the weights exported once in float32. Each row times every batch once
after one untimed batch (the first call's set-up), the device synchronized before the clock stops; the outputs are
compared afterwards, token for token: a CTranslate2 row counts the captions whose tokens are ours (`same_as_vaswani`)
and gives CTranslate2's seconds over ours (`vaswani_speed_ratio`: 1.0 or more where ours is as fast); the compiled
rows count the captions decoded to the eager rows' tokens and give their seconds over the eager rows'.

A row that cannot run is a row with its error: CTranslate2's CUDA build loads CUDA 12's cuBLAS (libcublas.so.12), which
a machine of CUDA 13 alone does not have, and a wheel of it (581 MB) does not fit a device call (64 MiB). The dry run
decodes a few captions on the CPU in float32, CTranslate2 included, so that the part cannot rot between lent GPUs.
"""

import functools
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
    """`generate`'s settings of a row: the model's (`benchmarking.generation_settings`, its length limit or
    `max_new_tokens`), searched as the CPU serving table's rows are (`benchmarking.search_settings`: with beams,
    `early_stopping=True`, the rule CTranslate2's search follows)."""
    from .benchmarking import generation_settings, search_settings

    settings = generation_settings(generation_config)
    if max_new_tokens:
        settings["max_new_tokens"] = max_new_tokens
    return {**search_settings(settings, num_beams), "do_sample": False}


def generation_worker(sizes: GenerationSizes, validation_file: Path, model_dir: Path, work_dir: Path, write) -> None:
    """Measure the part's rows, each given to `write` as soon as it is measured (the part's time limit may stop this
    process before the last): ours greedy and beam 4, then CTranslate2's, then ours compiled. Each engine is set up
    once (its model loaded, the captions encoded); one that cannot be gives its rows its error."""
    from transformers import AutoTokenizer, GenerationConfig

    device = "cuda" if torch.cuda.is_available() else "cpu"
    texts = captions(validation_file, sizes.captions)
    batches = [texts[start : start + sizes.batch_size] for start in range(0, len(texts), sizes.batch_size)]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    generation_config = GenerationConfig.from_pretrained(model_dir)
    ours_precision = "bf16" if device == "cuda" else "fp32"
    engines = {"vaswani": (ours_precision, _vaswani),
               "ctranslate2": ("float16" if device == "cuda" else "float32", _ctranslate2),
               "vaswani_compiled": (ours_precision, functools.partial(_vaswani, compiled=True))}
    ours = {}  # num_beams: (seconds, outputs) of this project's rows
    for engine, (precision, set_up) in engines.items():
        try:
            decode, error = set_up(model_dir, tokenizer, batches, device, work_dir), None
        except Exception as failure:  # noqa: BLE001 - CTranslate2 missing, or without CUDA: its rows say so
            decode, error = None, f"{type(failure).__name__}: {failure}"
        for beams in BEAMS:
            row = {"engine": engine, "precision": precision, "num_beams": beams, "captions": len(texts),
                   "batch_size": sizes.batch_size}
            if decode is None:
                write({**row, **_no_numbers(), "error": error})
                continue
            try:
                seconds, outputs = decode(decoding_settings(generation_config, beams, sizes.max_new_tokens))
            except Exception as failure:  # noqa: BLE001 - reported; the other rows stand without it
                write({**row, **_no_numbers(), "error": f"{type(failure).__name__}: {failure}"})
                continue
            same = ratio = None
            if engine == "vaswani":
                ours[beams] = (seconds, outputs)
            elif beams in ours:  # CTranslate2's or the compiled rows, against the eager rows of ours
                our_seconds, our_outputs = ours[beams]
                same, ratio = sum(a == b for a, b in zip(outputs, our_outputs)), seconds / our_seconds
            write({**row, **_numbers(seconds, outputs), "same_as_vaswani": same, "vaswani_speed_ratio": ratio,
                   "error": None})


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


def _vaswani(model_dir: Path, tokenizer, batches: list[list[str]], device: str, work_dir: Path, compiled=False):
    """This project's model loaded and the batches encoded, once; the function that decodes every batch with
    `generate` and some settings (`compiled`: with a static cache and the compiled forward, `compiled_settings`, every
    batch padded to the longest caption, so that each search compiles one step: a source of another length would be
    another graph): its seconds, and each caption's new tokens up to its end token."""
    from vaswani import VaswaniForConditionalGeneration

    from .benchmarking import generated_tokens

    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    model = VaswaniForConditionalGeneration.from_pretrained(model_dir, dtype=dtype).to(device).eval()
    padding = {"padding": True}
    if compiled:
        longest = max(len(ids) for batch in batches for ids in tokenizer(batch, truncation=True)["input_ids"])
        padding = {"padding": "max_length", "max_length": longest}
    inputs = [{key: value.to(device) for key, value in
               tokenizer(batch, return_tensors="pt", truncation=True, **padding).items()
               if key in ("input_ids", "attention_mask")} for batch in batches]
    eos = model.generation_config.eos_token_id

    def decode(settings: dict):
        settings = {**settings, **compiled_settings(device)} if compiled else settings
        with torch.inference_mode():
            model.generate(**inputs[0], **settings)  # the first call's set-up (and compilation), untimed
            _synchronize(device)
            started = time.perf_counter()
            outputs = [model.generate(**batch, **settings) for batch in inputs]
            _synchronize(device)
            seconds = time.perf_counter() - started
        return seconds, [row for output in outputs for row in generated_tokens(output, eos)]

    return decode


def compiled_settings(device: str) -> dict:
    """`generate`'s settings of the compiled rows: a static cache (a size fixed for the whole search, which the
    compiled step and its CUDA graphs need) and transformers' compiled forward, the whole step one graph
    (`fullgraph`); on a CPU (the dry run) dynamo's `eager` backend, told to compile there too."""
    from transformers.generation.configuration_utils import CompileConfig

    config = CompileConfig(fullgraph=True) if device == "cuda" else CompileConfig(fullgraph=True, backend="eager")
    config._compile_all_devices = device != "cuda"  # (transformers compiles the forward only on a GPU unless told)
    return {"cache_implementation": "static", "compile_config": config}


def _ctranslate2(model_dir: Path, tokenizer, batches: list[list[str]], device: str, work_dir: Path):
    """The model exported to CTranslate2 (weights in float32, computed in float16 on a GPU) and loaded, and the
    batches tokenized, once; the function that decodes every batch with `translate_batch` and the options of some
    `generate` settings: its seconds, and each caption's tokens (its best hypothesis) as ids of the model's
    vocabulary."""
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

    def decode(settings: dict):
        options = translate_options(GenerationConfig(**settings))
        translator.translate_batch(sources[0], max_batch_size=len(sources[0]), **options)  # untimed, as ours
        started = time.perf_counter()
        results = [translator.translate_batch(batch, max_batch_size=len(batch), **options) for batch in sources]
        seconds = time.perf_counter() - started
        return seconds, [tokenizer.convert_tokens_to_ids(result.hypotheses[0]) for batch in results
                         for result in batch]

    return decode


__all__ = ["BEAMS", "MODEL", "GenerationSizes", "captions", "compiled_settings", "decoding_settings",
           "generation_worker"]
