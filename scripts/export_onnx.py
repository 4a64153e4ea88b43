"""Export a translation or summarization model to ONNX: an encoder graph and a decoder graph with a cache.

    python scripts/export_onnx.py --model results/multi30k_en_de/model --output_dir onnx/multi30k_en_de

The folder then holds `encoder.onnx`, `decoder.onnx` (one decoding step: the new token and the cache of the earlier
steps in, the logits and the grown cache out), the tokenizer, `config.json` and `generation_config.json`. Decode it
with onnxruntime, greedy or beam search, to the tokens of `model.generate(...)` with the same settings (by default the
generation config's, as for `generate`):

    from vaswani.serving.onnx_generation import OnnxGenerator
    print(OnnxGenerator("onnx/multi30k_en_de", num_threads=1)(["A man is riding a horse."]))
    print(OnnxGenerator("onnx/multi30k_en_de", num_threads=1)(["A man is riding a horse."], num_beams=4))

The graphs' inputs and outputs are described in `vaswani.serving.onnx_export`. Every position type (sinusoidal, learned,
relative) and pre- and post-LayerNorm are exported; each graph is checked against PyTorch with onnxruntime before it
is written. What cannot be exported (a classifier, a folder of another model) is refused with the reason. Needs the
optional extra: pip install 'vaswani-transformer[onnx]'.
"""

from vaswani.cli import run_command
from vaswani.serving.export_commands import onnx_main as main
from vaswani.serving.onnx_export import OnnxExportError


if __name__ == "__main__":
    run_command(main, OnnxExportError)
