"""The WMT14 English-German recipe (scripts/configs/wmt14_en_de_{base,big}.yaml): the paper's settings, a run of the
config on a tiny stand-in of the Hub's `wmt14` `de-en` (its `translation` column) through the Hub's code path and on
local files of that schema, evaluated as the paper, and a second run and a resume that read the first run's
vocabulary and tokenized pairs back instead of learning and tokenizing again."""

import json

import datasets
import pytest

from helpers import REPO, load_script, write_jsonl
from training_helpers import run_in_process
from vaswani import VaswaniConfig
from vaswani.cli import parse_config_overrides
from vaswani.training.arguments import parse_arguments
from vaswani.training.synthetic import generate_pairs


CONFIGS = REPO / "scripts" / "configs"
pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.mark.parametrize("name, model, dropout, updates, averaged", [
    ("base", dict(d_model=512, encoder_attention_heads=8, encoder_ffn_dim=2048), 0.1, 100_000, 5),
    ("big", dict(d_model=1024, encoder_attention_heads=16, encoder_ffn_dim=4096), 0.3, 300_000, 20),
])
def test_the_configs_hold_the_papers_settings(name, model, dropout, updates, averaged):
    data, model_args, args = parse_arguments(["--config", str(CONFIGS / f"wmt14_en_de_{name}.yaml")])
    assert (data.dataset_name, data.dataset_config_name, data.validation_split) == ("wmt14", "de-en", "validation")
    assert (data.source_lang, data.target_lang) == ("en", "de")
    config = VaswaniConfig.from_preset(model_args.preset, **parse_config_overrides(model_args.config_overrides))
    for field, value in {**model, "encoder_layers": 6, "decoder_layers": 6, "tie_word_embeddings": True,
                         "position_embedding_type": "sinusoidal"}.items():
        assert getattr(config, field) == value, field
    assert (model_args.dropout, model_args.label_smoothing) == (dropout, 0.1)
    assert (model_args.vocab_size, model_args.split_punctuation, model_args.tokenizer) == (37_000, True, None)
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert (args.learning_rate, args.warmup_steps, args.cooldown_steps) == (None, 4000, 0)  # the paper's schedule
    assert (args.tokens_per_update, args.exact_tokens_per_update, args.max_steps) == (25_000, True, updates)
    assert args.keep_checkpoints == averaged and updates % args.save_steps == 0
    assert (args.eval_num_beams, args.eval_length_penalty) == (4, 0.6)


def _pairs(count: int, seed: int) -> list[dict]:
    """Rows of the Hub's wmt14 de-en: {"translation": {"de": ..., "en": ...}}."""
    return [{"translation": {"de": pair["de"], "en": pair["en"]}} for pair in generate_pairs(count, seed)]


def _tiny(output_dir, **overrides) -> list[str]:
    """The base config with a tiny model and tiny updates (2 micro-batches of 256 tokens, exact) for a CPU."""
    options = dict(preset="tiny", config_overrides="tie_word_embeddings=true", vocab_size=300, max_source_length=64,
                   max_target_length=64, tokens_per_update=512, max_tokens_per_batch=256, max_steps=2, save_steps=1,
                   eval_steps=2, eval_max_new_tokens=12, max_eval_samples=4, eval_batch_size=4,
                   preprocessing_num_workers=1, report_to="none", output_dir=output_dir)
    options.update(overrides)
    argv = ["--config", str(CONFIGS / "wmt14_en_de_base.yaml")]
    for name, value in options.items():
        argv += [f"--{name}", str(value)]
    return argv


def test_the_config_trains_on_the_hubs_wmt14_and_is_evaluated_as_the_paper(tmp_path, monkeypatch, capsys):
    # the Hub's wmt14 de-en as `datasets` gives it (parquet files, a Translation feature), its download left out
    folder, asked = tmp_path / "wmt14", []
    features = datasets.Features({"translation": datasets.Translation(languages=["de", "en"])})
    for split, count, seed in (("train", 48, 0), ("validation", 6, 1)):
        datasets.Dataset.from_list(_pairs(count, seed), features=features).to_parquet(folder / f"{split}.parquet")
    real_load_dataset = datasets.load_dataset

    def load_dataset(path, name=None, split=None, **kwargs):
        if path != "wmt14":
            return real_load_dataset(path, name, split=split, **kwargs)
        asked.append((name, split))
        return real_load_dataset("parquet", data_files=str(folder / f"{split}.parquet"), split="train")

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    run = tmp_path / "run"
    run_in_process(_tiny(run))
    printed = capsys.readouterr().out
    assert asked == [("de-en", "train"), ("de-en", "validation")]
    assert "1 process(es) x 2 micro-batch(es) of <= 256 tokens per update = 512 tokens a side (target 512, exact)" in printed
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()][-1] == 2
    assert "update 2: val_loss" in printed  # the evaluation at the end of the run

    # the paper's evaluation of the run: its checkpoints averaged (5 asked for, 2 there), beam 4, length penalty 0.6,
    # outputs up to the input's length + 50, BLEU with compounds split, on local files of the same schema
    test_file = write_jsonl(tmp_path / "test.jsonl", _pairs(5, 2))
    load_script("average_checkpoints").main(["--run_dir", str(run), "--last", "5", "--output_dir",
                                             str(run / "averaged")])
    results = load_script("evaluate_model").main([
        "--model", str(run / "averaged"), "--task", "translation", "--test_file", str(test_file),
        "--dataset_label", "wmt14", "--source_column", "en", "--target_column", "de", "--num_beams", "4",
        "--length_penalty", "0.6", "--max_new_tokens_over_input", "50", "--compound_split", "true",
        "--batch_size", "4", "--diagnostic_examples", "0", "--output_file", str(tmp_path / "results.json"),
    ])
    assert [metric["type"] for metric in results["metrics"]] == ["sacrebleu", "tokenized_bleu",
                                                                 "tokenized_bleu_compound_split"]
    assert all(metric["signature"] for metric in results["metrics"])
    assert results["decoding"] == {"num_beams": 4, "length_penalty": 0.6, "max_new_tokens_over_input": 50}
    assert "the input's length + 50 new tokens" in results["conventions"]
    assert "the mean of 2 checkpoints (updates 1, 2" in results["conventions"]
    assert results["dataset"]["num_examples"] == 5 and results["dataset"]["split"] == "test"


def test_a_second_run_and_a_resume_read_the_vocabulary_and_the_tokenized_pairs_back(tmp_path, capsys):
    train = write_jsonl(tmp_path / "data" / "train.jsonl", _pairs(48, 0))
    validation = write_jsonl(tmp_path / "data" / "validation.jsonl", _pairs(6, 1))
    files = dict(train_file=train, validation_file=validation)
    first, second = tmp_path / "first", tmp_path / "second"
    run_in_process(_tiny(first, max_steps=1, **files))
    printed = capsys.readouterr().out
    assert "Learning a 300-token vocabulary" in printed
    assert "train: 48 pairs -> " in printed and printed.count("; tokenized in") == 2

    run_in_process(_tiny(first, resume="true", **files))
    printed = capsys.readouterr().out
    assert "Resumed from" in printed and "vocabulary" not in printed
    assert printed.count("read from the cache of an earlier tokenization") == 2 and "; tokenized in" not in printed

    run_in_process(_tiny(second, max_steps=1, **files))
    printed = capsys.readouterr().out
    assert "The 300-token vocabulary learned before from the same training data with the same options" in printed
    assert "Learning a" not in printed
    assert printed.count("read from the cache of an earlier tokenization") == 2
    for name in ("tokenizer.json", "tokenizer_config.json"):
        assert (second / "tokenizer" / name).read_bytes() == (first / "tokenizer" / name).read_bytes()
    # other options are learned anew; the pairs are tokenized anew where the tokenizer differs in content, not where
    # it is the same (these few pairs hold fewer merges than 280 or 300 pieces: both sizes learn the same tokenizer)
    run_in_process(_tiny(tmp_path / "third", max_steps=1, vocab_size=280, **files))
    printed = capsys.readouterr().out
    assert "Learning a 280-token vocabulary" in printed
    assert printed.count("read from the cache of an earlier tokenization") == 2
    run_in_process(_tiny(tmp_path / "fourth", max_steps=1, split_punctuation="false", **files))
    printed = capsys.readouterr().out
    assert "Learning a 300-token vocabulary" in printed and printed.count("; tokenized in") == 2
