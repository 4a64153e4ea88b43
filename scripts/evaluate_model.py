"""Evaluate a model on a dataset split through the pipelines, and write the results file that the model card
and `push_to_hub` read: the metrics with their signatures, the decoding settings, the number of examples and the
time taken.

    python scripts/evaluate_model.py --model runs/multi30k --task translation \
        --test_file ../shared/data/multi30k/test_2016_flickr.jsonl --dataset_label bentrevett/multi30k \
        --source_column en --target_column de --num_beams 4 --length_penalty 0.6

    python scripts/evaluate_model.py --model runs/aeslc --task summarization \
        --validation_file ../shared/data/aeslc/validation.jsonl --dataset_label Yale-LILY/aeslc

    python scripts/evaluate_model.py --model runs/sst2 --task text-classification \
        --validation_file ../shared/data/sst2/validation.jsonl --dataset_label stanfordnlp/sst2

    python scripts/evaluate_model.py --model runs/conll2003 --task token-classification \
        --validation_file ../shared/data/conll2003/validation.jsonl --dataset_label eriktks/conll2003

    python scripts/evaluate_model.py --model results/multi30k_en_de/model --task translation \
        --test_file ../shared/data/multi30k/test_2016_flickr.jsonl --split test_2016_flickr \
        --engine ctranslate2 --quantization int8 --output_file ct2_int8.json

The data are a local file (`--validation_file` or `--test_file`) or a split of a dataset on the Hub (`--dataset_name`,
`--dataset_config_name`, `--split`). The results file records the split (`--split`; default: validation, or test with
`--test_file`) and the dataset by `--dataset_label` (default: `--dataset_name`, else the file as given), so that a
local copy of a Hub dataset is named as the dataset.

The results go to `--output_file` (default: `evaluation_results.json` in the model folder). The model must
be fine-tuned for the task: one whose task head would be new (random) is refused. Translation and summarization
decode on a CPU through the project's CPU decoder, every model's default (the tokens of transformers' generate loop,
faster; `--cpu_decoding False` runs transformers' loop). `--quantization int8` runs the model with int8 Linear
layers (vaswani.serving.cpu_inference); `--engine ctranslate2` exports the model to CTranslate2
(vaswani.serving.ctranslate2_export, into a temporary folder) and decodes there, with the same decoding settings.
"""

from vaswani.cli import run_command
from vaswani.evaluation.run import main


if __name__ == "__main__":
    run_command(main)
