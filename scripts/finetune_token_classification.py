"""Fine-tune a model for token classification (named-entity recognition, CoNLL-2003 style: a column of words and a
column of BIO tags) with `Trainer`, scored with entity-level F1 (seqeval-style).

    python scripts/finetune_token_classification.py --preset small --tokenizer_name tokenizers/conll2003 \
        --train_file ../shared/data/conll2003/train.jsonl --validation_file ../shared/data/conll2003/validation.jsonl \
        --output_dir runs/conll2003 --do_train --do_eval --num_train_epochs 5

`--model_name_or_path MODEL` starts from a saved model instead; a seq2seq model gives its shared embedding
and encoder, and the log names the new `classifier` and the decoder left unused. The fine-tuned folder works with
`transformers.pipeline("token-classification", model=DIR, aggregation_strategy="first", trust_remote_code=True)`.

Tags may be names or ids; their names come from `--label_set`, a `labels.json` beside the training file (CoNLL-2003
here has one), the dataset's `ClassLabel` feature, or the values in the data. On two processes:
`torchrun --nproc_per_node 2 scripts/finetune_token_classification.py ...`.
"""

from vaswani.cli import run_command
from vaswani.finetuning.token_classification import main


if __name__ == "__main__":
    run_command(main)
