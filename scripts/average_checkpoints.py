"""Average the weights of the last N checkpoints of a run into one model, as the paper does (section 6.1: "for the
base models, we used a single model obtained by averaging the last 5 checkpoints"; 20 for the big models).

    python scripts/average_checkpoints.py --run_dir outputs/multi30k --last 5 --output_dir outputs/multi30k/averaged

or name the checkpoints (`checkpoints/step-*` folders of scripts/train.py, or any saved model folders):

    python scripts/average_checkpoints.py --checkpoints RUN/checkpoints/step-00009000 RUN/checkpoints/step-00010000 \
        --output_dir RUN/averaged

The checkpoints must be of one model: the same config (but for the version of transformers that saved it) and the
same tokenizer (vocabulary, merges and added tokens); checkpoints that differ in either are refused, naming the
first difference. The result is saved with `save_pretrained`, with that tokenizer, and loads like any model of this
project (Auto classes, pipelines). `checkpoint_averaging.json` beside it names the checkpoints averaged;
`scripts/evaluate_model.py` states them in the conventions of the model's scores. The folder appears whole or not at
all; an existing one is replaced only with `--overwrite_output_dir` (vaswani.output_paths).
"""

from vaswani.cli import run_command
from vaswani.training.averaging import main


if __name__ == "__main__":
    run_command(main)
