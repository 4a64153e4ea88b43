"""Whether a tokenizer belongs to a model: the check made wherever the two meet, by the pipelines, by fine-tuning when
it loads a head and by the exports.

This file is copied into every saved model beside `pipeline_vaswani.py`, which imports it, and imported there on
its own (where the `vaswani` package may not be installed), so it imports nothing.
"""


def check_vocabulary(model, tokenizer) -> None:
    """Refuse a tokenizer with more tokens than the model has embedding rows: its higher ids would index past the
    table, an IndexError deep inside the model on the first text that uses one. They were not trained together."""
    rows = model.get_input_embeddings().num_embeddings
    if len(tokenizer) > rows:
        raise ValueError(
            f"The tokenizer has {len(tokenizer):,} tokens but the model's embedding table has {rows:,} rows: token ids "
            f"from {rows:,} up would index past it, so the two do not belong together. Use the tokenizer saved with "
            "the model."
        )


__all__ = ["check_vocabulary"]
