"""Fine-tuning with the standard `Trainer`, one module per job:

- `head_loading`: the tokenizer and the model with its task head, and what was new in it;
- `token_alignment`: word labels on subword tokens;
- `run`: the command line, the checkpoint to resume from, and the train -> save -> evaluate sequence;
- the tasks, each a command (`main`, installed as `vaswani-finetune-*`; scripts/finetune_*.py call the same):
  `seq2seq` (translation and summarization: its options, the tokenized pairs and the metrics of generated text),
  `classification` (a text and its label) and `token_classification` (words and their BIO tags).

Everything else is transformers: the tasks build a `Trainer` / `Seq2SeqTrainer` from `TrainingArguments`, so that
`torchrun` / `accelerate launch`, `--activation_checkpointing`, `--gradient_accumulation_steps`,
`--resume_from_checkpoint` and the rest work as for any model. The data options are those of transformers' example
scripts (`--train_file`, `--validation_file`, `--dataset_name`, `--max_train_samples`); they, the splits and the label
sets are `vaswani.data`'s, which evaluation shares.
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


__all__ = [
    "KeepGenerationConfig",
    "argmax_logits",
    "check_run",
    "load_labelled_head",
    "load_tokenizer",
    "loss_is_a_batch_mean",
    "resume_checkpoint",
    "setup_logging",
    "start_run",
    "train_and_evaluate",
]
