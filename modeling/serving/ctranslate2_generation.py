"""Translate or summarize with a CTranslate2 export of a model (scripts/export_ctranslate2.py), called as the
project's pipelines are called, so the evaluation code scores both engines alike:

    from vaswani.serving.ctranslate2_generation import CTranslate2Pipeline
    pipe = CTranslate2Pipeline("ct2/multi30k_en_de", task="translation")
    pipe(["A man is riding a horse."], batch_size=32, num_beams=5, max_new_tokens=80)
    # [{"translation_text": "Ein Mann reitet auf einem Pferd."}]

The folder's tokenizer turns each text into the tokens `generate()` would read (ending with `</s>`; a multilingual
model's target-language tag first), and the generation arguments become the `translate_batch` arguments that decode
as `generate()` does (`vaswani.serving.ctranslate2_export.translate_options`).
"""

import os
from pathlib import Path

from transformers import AutoTokenizer, GenerationConfig

from .ctranslate2_export import import_ctranslate2, translate_options


OUTPUT_KEYS = {"translation": "translation_text", "summarization": "summary_text"}


class CTranslate2Pipeline:
    def __init__(self, folder: str | Path, task: str, tgt_lang: str | None = None, threads: int | None = None):
        if task not in OUTPUT_KEYS:
            raise ValueError(f"task={task!r}: a CTranslate2 export translates or summarizes; use one of {list(OUTPUT_KEYS)}.")
        ctranslate2 = import_ctranslate2()
        self.output_key = OUTPUT_KEYS[task]
        self.tokenizer = AutoTokenizer.from_pretrained(folder)
        if tgt_lang is not None:
            self.tokenizer.tgt_lang = tgt_lang  # a multilingual model reads the target's tag first
        threads = threads or int(os.environ.get("OMP_NUM_THREADS", 0)) or os.cpu_count()
        self.translator = ctranslate2.Translator(str(folder), device="cpu", inter_threads=1, intra_threads=threads)

    def __call__(self, texts: list[str], batch_size: int = 32, **generate_kwargs) -> list[dict]:
        options = translate_options(GenerationConfig(**generate_kwargs))
        tokenizer = self.tokenizer
        sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(list(texts), truncation=True)["input_ids"]]
        results = self.translator.translate_batch(sources, max_batch_size=batch_size, **options)
        return [
            {self.output_key: tokenizer.decode(tokenizer.convert_tokens_to_ids(result.hypotheses[0]),
                                               skip_special_tokens=True)}
            for result in results
        ]


__all__ = ["CTranslate2Pipeline"]
