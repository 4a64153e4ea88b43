"""Fine-tune a model for text classification (SST-2 style: a `text` column -> a `label` column) with `Trainer`.

From a trained seq2seq model (its encoder-decoder weights are reused, the classification head is new):

    python scripts/finetune_classification.py --model_name_or_path runs/multi30k \
        --train_file ../shared/data/sst2/train.jsonl --validation_file ../shared/data/sst2/validation.jsonl \
        --output_dir runs/sst2 --do_train --do_eval --num_train_epochs 1

From scratch: `--preset small --tokenizer_name tokenizers/sst2` instead of `--model_name_or_path`.
On two processes: `torchrun --nproc_per_node 2 scripts/finetune_classification.py ...` (or `accelerate launch`).

Labels may be ids or names; their names come from `--label_set`, a `labels.json` beside the training file, the
dataset's `ClassLabel` feature, or the values in the data (see vaswani.data.label_sets). Any `TrainingArguments` option
works: `--activation_checkpointing`, `--bf16`, `--resume_from_checkpoint last`, ...
"""

from vaswani.cli import run_command
from vaswani.finetuning.classification import main


if __name__ == "__main__":
    run_command(main)
