"""What the fine-tuning scripts share on the standard `Trainer` path, one module per job:

- `splits`: the data arguments, loading the splits (with the checks that make a bad input fail early and clearly)
  and preparing them;
- `head_loading`: the tokenizer and the model with its task head, and what was new in it;
- `label_sets`, `token_alignment`: the labels of classification and tagging, and word labels on subword tokens;
- `run`: the command line, the checkpoint to resume from, and the train -> save -> evaluate sequence;
- `seq2seq`: finetune_seq2seq.py's task: its options, the tokenized pairs and the metrics of generated text.

Everything else is transformers: the scripts build a `Trainer` / `Seq2SeqTrainer` from `TrainingArguments`, so that
`torchrun` / `accelerate launch`, `--activation_checkpointing`, `--gradient_accumulation_steps`,
`--resume_from_checkpoint` and the rest work as for any model. The data options are those of transformers' example
scripts (`--train_file`, `--validation_file`, `--dataset_name`, `--max_train_samples`).
"""

from .head_loading import load_labelled_head, load_tokenizer
from .run import (
    KeepGenerationConfig,
    argmax_logits,
    check_run,
    loss_is_a_batch_mean,
    resume_checkpoint,
    setup_logging,
    start_run,
    train_and_evaluate,
)
from .splits import (
    DataArguments,
    Splits,
    drop_empty_pairs,
    input_length,
    load_checked_split,
    load_splits,
    prepare_splits,
    usable_length,
)


__all__ = [
    "DataArguments",
    "KeepGenerationConfig",
    "Splits",
    "argmax_logits",
    "check_run",
    "drop_empty_pairs",
    "load_checked_split",
    "load_labelled_head",
    "input_length",
    "load_splits",
    "load_tokenizer",
    "loss_is_a_batch_mean",
    "prepare_splits",
    "resume_checkpoint",
    "setup_logging",
    "start_run",
    "train_and_evaluate",
    "usable_length",
]
