"""Scoring a trained model and looking inside it (`scripts/evaluate_model.py`, `scripts/extractive_baseline.py`),
one module per job (the attention heatmaps, which the web demo draws too, are `vaswani.serving.attention_map`):

    run             evaluate_model.py's options and its whole evaluation: load, score, write the results file
    scoring         a model on a dataset split, through the pipelines a user would call, into a results file
    diagnostics     whether a model's outputs depend on its input, and whether its encoder keeps tokens apart
    extractive      summaries made of a document's own lines: the baselines a summarizer must beat
    metrics         the metrics the project reports: local `evaluate` modules (no Hub needed), their names, and
                    compute_scores, which every caller scores with
"""
