"""Fine-tune an encoder-decoder for summarization or translation with `Seq2SeqTrainer`, from an existing model
(for example a model trained on Multi30k, fine-tuned on AESLC), scoring generated text (`--predict_with_generate`).

    python scripts/finetune_seq2seq.py --task summarization --model_name_or_path runs/multi30k \
        --train_file ../shared/data/aeslc/train.jsonl --validation_file ../shared/data/aeslc/validation.jsonl \
        --source_column document --target_column summary --output_dir runs/aeslc \
        --do_train --do_eval --predict_with_generate --generation_num_beams 4

    python scripts/finetune_seq2seq.py --task translation --model_name_or_path runs/multi30k \
        --train_file ../shared/data/multi30k/train.jsonl --validation_file ../shared/data/multi30k/validation.jsonl \
        --source_column en --target_column de --output_dir runs/multi30k-ft --do_train --do_eval --predict_with_generate

Translation is scored with sacreBLEU and with tokenized, lowercased BLEU (as papers report it); summarization with
ROUGE-1/2/L/Lsum. `--preset NAME --tokenizer_name DIR` trains from scratch instead. On two processes:
`torchrun --nproc_per_node 2 scripts/finetune_seq2seq.py ...`. Any `Seq2SeqTrainingArguments` option works
(`--activation_checkpointing`, `--bf16`, `--resume_from_checkpoint last`, `--generation_max_length`, ...).
"""

from vaswani.cli import run_command
from vaswani.finetuning.seq2seq import main


if __name__ == "__main__":
    run_command(main)
