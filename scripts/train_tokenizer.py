"""Train the project's tokenizer (joint BPE with byte fallback) from dataset columns and save it.

    python scripts/train_tokenizer.py --train_file ../shared/data/multi30k/train.jsonl --columns en de \
        --vocab_size 8000 --output_dir tokenizers/multi30k

The texts come from `--train_file`, a local JSON Lines / JSON / CSV file (or several, comma-separated), or from a
dataset on the Hub (`--dataset_name`, with `--dataset_config_name` and `--split`) for users who are online. The
folder appears whole or not at all; an existing one is replaced only with `--overwrite_output_dir`
(vaswani.output_paths).
"""

from vaswani.cli import run_command
from vaswani.training.tokenizer import main


if __name__ == "__main__":
    run_command(main)
