"""Run a model of this project over a corpus of any size: one output line per input line, in input order,
streamed a window at a time, on every core (or GPU, or process of `accelerate launch`), resumable after any kill.

    python scripts/predict.py --model results/multi30k_en_de/model --input_file sentences.en --output_file out.de

    cat sentences.en | python scripts/predict.py --model results/multi30k_en_de/model --input_file - --output_file -

    python scripts/predict.py --model results/sst2/model --input_file reviews.jsonl --text_column sentence \
        --output_file labels.jsonl --output_format jsonl

    accelerate launch scripts/predict.py --model M --input_file corpus.en --output_file corpus.de

The same command is installed as `vaswani-predict`. What it reads, writes and checks: vaswani.prediction.run; the
options: `--help`.
"""

from vaswani.cli import run_command
from vaswani.prediction.run import main


if __name__ == "__main__":
    run_command(main)
