"""Export a translation or summarization model to CTranslate2, a fast C++ inference engine for CPUs and GPUs.

    # float32: the tokens of generate(..., early_stopping=True), greedy or beam search
    python scripts/export_ctranslate2.py --model results/multi30k_en_de/model --output_dir outputs/ct2/multi30k_en_de

    # 8-bit weights: about 4x smaller and faster on a CPU; the outputs may differ slightly
    python scripts/export_ctranslate2.py --model results/multi30k_en_de/model --output_dir outputs/ct2/en_de_int8 \
        --quantization int8

The folder then holds the CTranslate2 model (`model.bin`, `config.json`, `shared_vocabulary.json`), the tokenizer, and
`translate_options.json`: the `translate_batch` arguments that decode as the model's generation config does.

    import json
    import ctranslate2
    from transformers import AutoTokenizer

    translator = ctranslate2.Translator("outputs/ct2/multi30k_en_de", device="cpu")
    tokenizer = AutoTokenizer.from_pretrained("outputs/ct2/multi30k_en_de", trust_remote_code=True)
    options = json.load(open("outputs/ct2/multi30k_en_de/translate_options.json"))
    ids = tokenizer(["A man is riding a horse."], truncation=True).input_ids  # each ends with </s>
    for result in translator.translate_batch([tokenizer.convert_ids_to_tokens(row) for row in ids], **options):
        print(tokenizer.decode(tokenizer.convert_tokens_to_ids(result.hypotheses[0])))

All position types (sinusoidal, learned, relative), pre- and post-LayerNorm and every activation of the config are
exported exactly; what cannot be (a classifier, a folder of another model) is refused with the reason. The conversion
itself is `vaswani.serving.ctranslate2_export`. Needs the optional extra: pip install
'vaswani-transformer[ctranslate2]'.
"""

from vaswani.cli import run_command
from vaswani.serving.export_commands import ctranslate2_main as main


if __name__ == "__main__":
    run_command(main)
