"""Serving a trained model fast: on CPUs from its own weights, or exported to another engine
(`scripts/export_ctranslate2.py`, `scripts/export_onnx.py`, `scripts/tools/benchmark.py`); and in a web page
(`scripts/app.py`), with the heatmap of where the model looks (`scripts/attention_heatmap.py`, `scripts/demo.py`).
One module per job (the CPU decoder every saved model carries, `cpu_decoding`, and its `search` are at the package's
top, beside the model file that runs them):

    cpu_inference           `CpuInference(model)`, the explicit CPU path holding the model (oneDNN Linear layers or
                            int8 ones), and `for_cpu_inference(model)`, its model for callers that take a model
    exporting               what the exports share: the checks of the model read and the folder written
    ctranslate2_export      the export to CTranslate2 and the decoding options that match `generate`'s
    ctranslate2_generation  a CTranslate2 export called as the project's pipelines are
    onnx_export             the export to ONNX: an encoder graph and a decoder graph with a cache, checked
    onnx_generation         an ONNX export decoded with onnxruntime, to the tokens of `generate`
    app                     the web demo (scripts/app.py): a Gradio page with a tab per model
    demo_tasks              what each tab runs: a model loaded safely, its task, its answers and messages
    attention_map           the cross-attention of one translated sentence, as a matrix and a heatmap
"""
