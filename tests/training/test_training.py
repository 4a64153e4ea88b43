"""scripts/train.py and vaswani.training: data, token-budget batching, the paper's recipe, checkpoints that survive a
hard kill, evaluation while training, logs, configs, checkpoint averaging, and the faults a run must survive.

Runs are tiny (a 55k-parameter model, a few hundred synthetic pairs, a few updates) and run in this process, except
where a process must die (the kill-and-resume test) or several must cooperate (test_training_distributed.py).
"""

import errno
import importlib.util
import json
import math
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from safetensors.torch import load_file
from tokenizers import Tokenizer
from tokenizers.models import WordLevel
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, PreTrainedTokenizerFast, pipeline

from helpers import REPO, load_script, needs_shared_data, tiny_config, write_jsonl
from training_helpers import metrics_records, run_in_process, run_script, tiny_argv
from vaswani import VaswaniForConditionalGeneration
from vaswani.cli import parse_config_overrides
from vaswani.training import checkpoints as checkpoints_module
from vaswani.training.arguments import TrainDataArguments, load_config_file, parse_arguments
from vaswani.training.batching import TokenBudgetBatches, collate
from vaswani.training.checkpoints import latest_checkpoint, list_checkpoints, remove_leftovers
from vaswani.training.errors import CheckpointError, TrainingDiverged, TrainingError
from vaswani.training.loop import TrainingProgress, run_update
from vaswani.training.optimization import build_optimizer_and_schedule
from vaswani.training.seq2seq_data import BpeDropoutEpochs, bpe_dropout_tokenizer, load_raw_splits, prepare_data
from vaswani.training.synthetic import generate_pairs, write_synthetic_translation

average_checkpoints = load_script("average_checkpoints")


# --- helpers ------------------------------------------------------------------------------------------------------

@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny models train fastest on one thread; two threads on two cores that other work also uses can be many
    times slower. Subprocesses get OMP_NUM_THREADS=1 for the same reason (and the same arithmetic)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
    """One complete tiny run, shared by the tests that inspect what a run leaves behind."""
    output_dir = tmp_path_factory.mktemp("run")
    outcome = run_in_process(tiny_argv(output_dir, report_to="tensorboard"))
    return output_dir, outcome.summary


# --- the synthetic default dataset ---------------------------------------------------------------------------------


def test_synthetic_task_is_deterministic_and_translates_grammatically(tmp_path):
    assert generate_pairs(50, seed=3) == generate_pairs(50, seed=3)
    assert generate_pairs(50, seed=3) != generate_pairs(50, seed=4)
    pairs = {pair["en"]: pair["de"] for pair in generate_pairs(5000, seed=0)}
    # case, gender and adjective endings, verb-second order after a fronted adverb, "in the" -> "im"
    expected = {
        "The dog sees a cat.": "Der Hund sieht eine Katze.",
        "The cat sees the dog.": "Die Katze sieht den Hund.",
        "A cat has a big ball.": "Eine Katze hat einen großen Ball.",
    }
    for english, german in expected.items():
        if english in pairs:
            assert pairs[english] == german
    adverb_first = [(en, de) for en, de in pairs.items() if en.startswith("Today ")]
    assert adverb_first and all(de.split()[1] in {"sieht", "mag", "findet", "hat", "beobachtet", "hört", "jagt",
                                                  "trägt", "will", "schläft", "läuft", "singt", "wartet", "spielt",
                                                  "isst"} for _, de in adverb_first)
    assert any(" im Garten." in de for de in pairs.values())

    paths = write_synthetic_translation(tmp_path, train_size=300, validation_size=40, seed=0)
    train = [json.loads(line)["en"] for line in paths["train"].read_text().splitlines()]
    validation = [json.loads(line)["en"] for line in paths["validation"].read_text().splitlines()]
    assert len(train) == 300 and len(validation) == 40
    assert not set(validation) & set(train), "validation sentences must be unseen in training"


# --- data: loading, column mapping, tokenization, filtering ---------------------------------------------------------


def test_local_pairs_are_mapped_tokenized_and_filtered_with_counts(tmp_path, tokenizer):
    rows = [{"document": f"A man is riding horse number {i}.", "summary": f"Ein Mann reitet Pferd {i}."}
            for i in range(10)]
    rows += [{"document": "   ", "summary": "Leer."}, {"document": "Empty target.", "summary": ""}]
    rows += [{"document": "word " * 60, "summary": "Zu lang."}]
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    validation_file = write_jsonl(tmp_path / "validation.jsonl", rows[:4])
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(validation_file),
                              source_column="document", target_column="summary", max_source_length=40,
                              max_target_length=40)
    prepared = prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data)

    report = prepared.reports[0]
    assert (report.rows, report.empty, report.too_long, report.kept) == (13, 2, 1, 10)
    assert "13 pairs -> 10 kept (2 empty dropped, 1 dropped as longer than 40/40" in report.describe(data)
    first = prepared.train[0]
    assert first["input_ids"] == tokenizer(rows[0]["document"])["input_ids"]
    assert first["labels"] == tokenizer(text_target=rows[0]["summary"])["input_ids"]
    assert first["source_length"] == len(first["input_ids"])
    assert prepared.validation[0]["target_text"] == rows[0]["summary"]  # the references for BLEU/ROUGE

    truncating = TrainDataArguments(**{**data.__dict__, "too_long": "truncate"})
    prepared = prepare_data(*load_raw_splits(truncating, tmp_path, seed=0), tokenizer, truncating)
    report = prepared.reports[0]
    assert (report.empty, report.truncated, report.kept) == (2, 1, 11)
    longest = max(prepared.train["source_length"])
    assert longest == 40 and prepared.train[10]["input_ids"][-1] == tokenizer.eos_token_id


def test_tokenization_is_cached_between_runs(tmp_path, tokenizer):
    train_file = write_jsonl(tmp_path / "train.jsonl", [{"en": f"Sentence {i}.", "de": f"Satz {i}."} for i in range(20)])
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(train_file))
    first = prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data).train
    cache = Path(first.cache_files[0]["filename"])
    written = cache.stat().st_mtime_ns
    second = prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data).train
    assert Path(second.cache_files[0]["filename"]) == cache
    assert cache.stat().st_mtime_ns == written, "the second run must reuse the tokenized cache, not rewrite it"


def test_a_dotted_column_reads_inside_a_dict_column(tmp_path, tokenizer):
    rows = [{"translation": {"en": f"A dog {i}.", "de": f"Ein Hund {i}."}} for i in range(6)]
    train_file = write_jsonl(tmp_path / "wmt.jsonl", rows)
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(train_file),
                         source_column="translation.en", target_column="translation.de")
    prepared = prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data)
    assert prepared.validation["target_text"][:2] == ["Ein Hund 0.", "Ein Hund 1."]


def test_transformers_translation_format_is_read_by_the_languages(tmp_path, tokenizer):
    """Rows as transformers' run_translation reads them: --source_lang/--target_lang name the keys of `translation`
    (here de->en, against the flat columns' defaults en/de); a whole run trains on them."""
    rows = [{"translation": {"en": f"A dog runs {i}.", "de": f"Ein Hund rennt {i}."}} for i in range(40)]
    train_file = write_jsonl(tmp_path / "run_translation.jsonl", rows)
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(train_file), source_lang="de",
                              target_lang="en")
    prepared = prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data)
    assert prepared.validation["source_text"][:2] == ["Ein Hund rennt 0.", "Ein Hund rennt 1."]
    assert prepared.validation["target_text"][:2] == ["A dog runs 0.", "A dog runs 1."]
    with pytest.raises(ValueError, match=r"no key 'fr'; its keys are \['en', 'de'\]. --source_lang/--target_lang"):
        load_raw_splits(TrainDataArguments(train_file=str(train_file), source_lang="fr", target_lang="en"), tmp_path, 0)

    output_dir = tmp_path / "run"
    run_in_process(tiny_argv(output_dir, train_file=train_file, validation_file=train_file, source_lang="de",
                             target_lang="en", max_steps=2, eval_steps=2, save_steps=2))
    config = json.loads((output_dir / "best" / "config.json").read_text())
    assert (config["source_lang"], config["target_lang"]) == ("de", "en")


def test_a_hub_dataset_is_asked_for_by_name_config_and_split(tmp_path, monkeypatch):
    import datasets

    asked = []

    def load_dataset(name, config=None, split=None, **kwargs):
        asked.append((name, config, split))
        return datasets.Dataset.from_list([{"en": "A dog.", "de": "Ein Hund."}] * 3)

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    data = TrainDataArguments(dataset_name="someone/parallel-corpus", dataset_config_name="en-de",
                              validation_split="dev")
    train, validation = load_raw_splits(data, tmp_path, seed=0)
    assert asked == [("someone/parallel-corpus", "en-de", "train"), ("someone/parallel-corpus", "en-de", "dev")]
    assert len(train) == len(validation) == 3


def test_a_local_file_without_validation_holds_out_pairs(tmp_path):
    train_file = write_jsonl(tmp_path / "train.jsonl", [{"en": f"s {i}", "de": f"t {i}"} for i in range(300)])
    train, validation = load_raw_splits(TrainDataArguments(train_file=str(train_file)), tmp_path, seed=0)
    assert (len(train), len(validation)) == (297, 3)
    assert not set(train["en"]) & set(validation["en"])


def test_missing_column_error_names_it_and_lists_the_columns(tmp_path):
    train_file = write_jsonl(tmp_path / "train.jsonl", [{"english": "a", "german": "b"}] * 3)
    with pytest.raises(ValueError, match=r"Column 'en' is not in .*train.jsonl.*\['english', 'german'\]"):
        load_raw_splits(TrainDataArguments(train_file=str(train_file), validation_file=str(train_file)), tmp_path, 0)


@pytest.mark.parametrize("rows, columns, message", [
    ([{"en": "a", "de": "b"}, {"en": "c", "de": 5}], ("en", "de"),
     r"train.jsonl, row 2: `de` holds an integer \(5\), not text"),
    ([{"en": "a", "de": "b"}] * 2 + [{"en": ["c"], "de": "d"}], ("en", "de"),
     r"train.jsonl, row 3: `en` holds a list \(\['c'\]\), not text"),
    ([{"translation": {"en": "a", "de": "b"}}, {"translation": {"en": "c", "de": 7.5}}],
     ("translation.en", "translation.de"), r"train.jsonl, row 2: `translation.de` holds a number \(7.5\), not text"),
], ids=["integer", "list", "number in a dict column"])
def test_a_text_column_holding_a_number_or_a_list_is_named_with_its_row(tmp_path, rows, columns, message):
    """Not counted as an empty pair and dropped, as it was: the file is wrong, and the row says where."""
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(train_file),
                              source_column=columns[0], target_column=columns[1])
    with pytest.raises(ValueError, match=message):
        load_raw_splits(data, tmp_path, 0)


def test_an_empty_dataset_is_an_error(tmp_path, tokenizer):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match=r"empty\.jsonl is empty"):
        load_raw_splits(TrainDataArguments(train_file=str(empty)), tmp_path, 0)
    blank = write_jsonl(tmp_path / "blank.jsonl", [{"en": "", "de": "x"}, {"en": "y", "de": " "}])
    data = TrainDataArguments(train_file=str(blank), validation_file=str(blank))
    with pytest.raises(ValueError, match=r"No usable pair is left in the train: 2 pairs -> 0 kept \(2 empty"):
        prepare_data(*load_raw_splits(data, tmp_path, 0), tokenizer, data)


def test_a_broken_file_is_reported_with_its_file_and_line(tmp_path):
    not_utf8 = tmp_path / "latin1.jsonl"
    not_utf8.write_bytes(b'{"en": "a", "de": "b"}\n{"en": "caf\xe9", "de": "b"}\n')
    with pytest.raises(ValueError, match=r"latin1\.jsonl, line 2: not valid UTF-8"):
        run_in_process(tiny_argv(tmp_path / "out", train_file=str(not_utf8)))

    not_json = tmp_path / "broken.jsonl"
    not_json.write_text('{"en": "a", "de": "b"}\n{"en": "a", "de": "b"}\n{"en": "a" "de": "b"}\n')
    with pytest.raises(ValueError, match=r"broken\.jsonl, line 3: not valid JSON"):
        load_raw_splits(TrainDataArguments(train_file=str(not_json)), tmp_path, 0)


def test_the_training_data_come_from_one_source_named_by_its_option(tmp_path, monkeypatch):
    import datasets

    def no_hub(*args, **kwargs):
        raise AssertionError(f"the Hub was asked for {args}")

    train_file = write_jsonl(tmp_path / "train.jsonl", [{"en": f"s {i}", "de": f"t {i}"} for i in range(4)])
    monkeypatch.setattr(datasets, "load_dataset", no_hub)  # every error comes before any loading
    with pytest.raises(ValueError, match=rf"--dataset_name {re.escape(str(train_file))} is a local file, not a "
                                         r"dataset on the Hub: give local files with --train_file\."):
        load_raw_splits(TrainDataArguments(dataset_name=str(train_file)), tmp_path, 0)
    with pytest.raises(FileNotFoundError, match=r"--train_file .*missing\.jsonl: no such file\.$"):
        load_raw_splits(TrainDataArguments(train_file=str(tmp_path / "missing.jsonl")), tmp_path, 0)
    with pytest.raises(ValueError, match=rf"--train_file {re.escape(str(train_file))} and --dataset_name "
                                         r"someone/corpus both give the data of one split"):
        load_raw_splits(TrainDataArguments(train_file=str(train_file), dataset_name="someone/corpus"), tmp_path, 0)
    with pytest.raises(FileNotFoundError, match=r"--validation_file .*valid\.jsonl: no such file"):
        load_raw_splits(TrainDataArguments(train_file=str(train_file), validation_file=str(tmp_path / "valid.jsonl")),
                        tmp_path, 0)


@needs_shared_data
@pytest.mark.parametrize("config", ["multi30k_en_de", "multi30k_de_en", "aeslc", "samsum"])
def test_experiment_configs_load_their_real_datasets(config, tmp_path, tokenizer, monkeypatch):
    monkeypatch.chdir(REPO)  # the configs name ../shared/data relative to the repository root
    data, model, training = parse_arguments(["--config", f"scripts/configs/{config}.yaml", "--max_train_samples", "40",
                                             "--max_steps", "3", "--cooldown_steps", "0"])
    assert training.max_steps == 3 and training.cooldown_steps == 0  # the command line overrides the file
    train_raw, validation_raw = load_raw_splits(data, tmp_path, seed=0)
    prepared = prepare_data(train_raw, validation_raw.select(range(20)), tokenizer, data)
    assert prepared.reports[0].rows == 40 and len(prepared.train) > 0
    assert prepared.validation["target_text"][0] == validation_raw[0][data.target_column]


# --- batching by tokens ---------------------------------------------------------------------------------------------


def lengths(count=500, seed=0):
    generator = torch.Generator().manual_seed(seed)
    source = torch.randint(3, 60, (count,), generator=generator)
    target = (source + torch.randint(-2, 8, (count,), generator=generator)).clamp(min=2)
    return source.tolist(), target.tolist()


def test_batches_respect_the_token_budget_and_hold_every_pair_once():
    source, target = lengths()
    batches = TokenBudgetBatches(source, target, max_tokens=400, seed=0).all_batches(epoch=0)
    for batch in batches:
        assert max(source[i] for i in batch) * len(batch) <= 400
        assert max(target[i] for i in batch) * len(batch) <= 400
    assert sorted(i for batch in batches for i in batch) == list(range(500))
    # length bucketing: far less padding than batches of the same sizes drawn at random
    padding = sum(max(source[i] for i in b) * len(b) - sum(source[i] for i in b) for b in batches) / sum(source)
    assert padding < 0.1


def test_batches_are_deterministic_for_a_seed_and_reshuffled_each_epoch():
    source, target = lengths()
    make = lambda seed: TokenBudgetBatches(source, target, max_tokens=400, seed=seed)  # noqa: E731
    assert make(0).all_batches(0) == make(0).all_batches(0)
    assert make(0).all_batches(0) != make(1).all_batches(0)
    assert make(0).all_batches(0) != make(0).all_batches(1)


def test_processes_get_disjoint_shares_of_equal_length():
    source, target = lengths()
    shares = [TokenBudgetBatches(source, target, 400, seed=0, num_processes=3, process_index=r).batches(0)
              for r in range(3)]
    assert len({len(share) for share in shares}) == 1
    seen = [i for share in shares for batch in share for i in batch]
    assert len(seen) == len(set(seen))
    everything = TokenBudgetBatches(source, target, 400, seed=0).all_batches(0)
    assert len(seen) >= 500 - 2 * max(len(b) for b in everything)  # at most 2 batches left over for 3 processes


def test_the_batch_stream_resumes_at_a_position_across_epochs():
    source, target = lengths(60)
    batches = TokenBudgetBatches(source, target, max_tokens=200, seed=0)
    stream = batches.stream()
    first_pass = [next(stream) for _ in range(len(batches.batches(0)) + 3)]
    assert first_pass[-1][:2] == (1, 2)
    resumed = batches.stream(*batches.next_position(*first_pass[4][:2]))
    assert [next(resumed) for _ in range(len(first_pass) - 5)] == first_pass[5:]


def test_a_pair_longer_than_the_budget_is_refused():
    with pytest.raises(ValueError, match="A pair of 80 tokens does not fit a batch of max_tokens=64"):
        TokenBudgetBatches([80, 3], [5, 4], max_tokens=64, seed=0)
    with pytest.raises(ValueError, match=r"--max_tokens_per_batch \(100\) is smaller than the longest allowed"):
        parse_arguments(["--max_tokens_per_batch", "100", "--max_source_length", "128"])


# --- BPE-dropout --------------------------------------------------------------------------------------------------


def bpe_dropout_pairs(tmp_path, tokenizer, **options):
    words = "man woman child dog horse street beach mountain playing riding walking looking jumping".split()
    rows = [{"en": f"A {words[i % 13]} is {words[(3 * i) % 13]} near the {words[(5 * i) % 13]} number {i}.",
             "de": f"Ein {words[(7 * i) % 13]} ist {words[i % 13]} am {words[(2 * i) % 13]} Nummer {i}."}
            for i in range(40)]
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    data = TrainDataArguments(train_file=str(train_file), validation_file=str(train_file), bpe_dropout=0.1, **options)
    return data, prepare_data(*load_raw_splits(data, tmp_path, seed=0), tokenizer, data).train


def test_bpe_dropout_segments_the_training_pairs_anew_every_epoch(tmp_path, tokenizer):
    data, train = bpe_dropout_pairs(tmp_path, tokenizer)
    texts = train[:]  # columns as lists
    usual = tokenizer(texts["source_text"])["input_ids"]
    epochs = BpeDropoutEpochs(train, tokenizer, data, SimpleNamespace(is_main_process=True))
    first, again, second = epochs.segment(0)["input_ids"], epochs.segment(0)["input_ids"], epochs.segment(1)
    assert first == again  # drawn once an epoch: the batches and their rows come from the same draw
    assert first != usual and second["input_ids"] != first
    assert sum(map(len, first)) > sum(map(len, usual))  # merges skipped: finer pieces, more of them
    # the same text in other pieces, and the end-of-sequence token still last
    assert tokenizer.batch_decode(second["labels"], skip_special_tokens=True) == texts["target_text"]
    assert all(ids[-1] == tokenizer.eos_token_id for ids in second["input_ids"])
    assert epochs.lengths(1) == ([len(ids) for ids in second["input_ids"]], [len(ids) for ids in second["labels"]])
    assert epochs.rows(1, [3, 0]) == {"input_ids": [second["input_ids"][3], second["input_ids"][0]],
                                      "labels": [second["labels"][3], second["labels"][0]]}
    # the tokenizer the model is saved with still segments as usual
    assert tokenizer.backend_tokenizer.model.dropout is None
    assert tokenizer(texts["source_text"])["input_ids"] == usual


def test_bpe_dropout_pairs_are_cut_at_the_limits_and_batched_by_their_own_lengths(tmp_path, tokenizer):
    data, train = bpe_dropout_pairs(tmp_path, tokenizer, max_source_length=20, max_target_length=20)
    epochs = BpeDropoutEpochs(train, tokenizer, data, SimpleNamespace(is_main_process=True))
    draws = [epochs.lengths(epoch) for epoch in range(5)]
    assert all(max(source) <= 20 and max(target) <= 20 for source, target in draws)
    # some pairs were longer in finer pieces, and were cut (in one draw in ~40, no target is: hence five draws)
    assert any(max(source) == 20 for source, _ in draws) and any(max(target) == 20 for _, target in draws)
    source, target = epochs.lengths(0)
    batches = TokenBudgetBatches(train["source_length"], train["target_length"], max_tokens=60, seed=0,
                                 epoch_lengths=epochs.lengths)
    for batch in batches.batches(0):
        assert max(source[i] for i in batch) * len(batch) <= 60 and max(target[i] for i in batch) * len(batch) <= 60
    assert sorted(i for batch in batches.all_batches(0) for i in batch) == list(range(len(train)))


def test_bpe_dropout_refuses_a_probability_outside_0_to_1_and_a_tokenizer_without_bpe():
    for value in ("1", "-0.1"):
        with pytest.raises(ValueError, match=rf"--bpe_dropout must be a finite number >= 0 and < 1 .*; got {value}"):
            parse_arguments(["--bpe_dropout", value])
    word_level = PreTrainedTokenizerFast(tokenizer_object=Tokenizer(WordLevel({"<unk>": 0}, unk_token="<unk>")))
    with pytest.raises(ValueError, match="--bpe_dropout needs a BPE tokenizer; this one's subword model is WordLevel"):
        bpe_dropout_tokenizer(word_level, 0.1)


def test_a_run_with_bpe_dropout_and_split_punctuation_trains_and_saves_the_tokenizer_it_learned(tmp_path):
    outcome = run_in_process(tiny_argv(tmp_path, bpe_dropout=0.1, split_punctuation=True, max_steps=4, eval_steps=4,
                                       save_steps=4))
    losses = [r["loss"] for r in metrics_records(tmp_path) if "loss" in r]
    assert len(losses) == 4 and all(math.isfinite(loss) for loss in losses)
    assert outcome.summary["steps"] == 4
    saved = json.loads((tmp_path / "last" / "tokenizer.json").read_text())
    assert saved["model"]["dropout"] is None  # segments as usual: the dropout was for training only
    # (Split and the second Metaspace: the word-start alignment of the offsets, tokenization_vaswani.word_splitters)
    assert [step["type"] for step in saved["pre_tokenizer"]["pretokenizers"]] == ["Metaspace", "Split", "Metaspace",
                                                                                  "Punctuation"]


# --- one update: accumulation weighting and clipping -----------------------------------------------------------------


def update_args(max_grad_norm=0.0):
    return parse_arguments(["--max_grad_norm", str(max_grad_norm), "--output_dir", "unused"])[2]


def pairs_batch(tokenizer, pairs):
    rows = {"input_ids": [tokenizer(s)["input_ids"] for s, _ in pairs],
            "labels": [tokenizer(text_target=t)["input_ids"] for _, t in pairs]}
    return collate(rows, tokenizer.pad_token_id)


def gradients_after_update(model, micro_batches, accumulation):
    """Run one update with SGD at learning rate 1, so that the change of the weights is minus the gradient."""
    accelerator = Accelerator(cpu=True)
    accelerator.gradient_accumulation_steps = accumulation
    before = [p.detach().clone() for p in model.parameters()]
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    prepared, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
    try:
        loss, tokens, norm = run_update(accelerator, prepared, optimizer, schedule, micro_batches,
                                        update_args(), TrainingProgress())
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
    return [b - p.detach() for b, p in zip(before, model.parameters())], loss, tokens


def test_accumulated_micro_batches_give_the_gradient_of_one_big_batch(tokenizer):
    from helpers import PAIRS

    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    state = {k: v.clone() for k, v in model.state_dict().items()}
    whole, loss_whole, tokens_whole = gradients_after_update(model, [pairs_batch(tokenizer, PAIRS)], 1)
    model.load_state_dict(state)
    # unequal micro-batches: a plain mean of their losses would weigh the 2 pairs like the 8 others
    parts, loss_parts, tokens_parts = gradients_after_update(
        model, [pairs_batch(tokenizer, PAIRS[:2]), pairs_batch(tokenizer, PAIRS[2:])], 2
    )
    assert tokens_parts == tokens_whole
    assert loss_parts == pytest.approx(loss_whole, rel=1e-5)
    for a, b in zip(whole, parts):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_gradients_are_clipped_before_the_step(tokenizer):
    from helpers import PAIRS

    torch.manual_seed(0)
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer)))
    accelerator = Accelerator(cpu=True)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    before = [p.detach().clone() for p in model.parameters()]
    prepared, optimizer, schedule = accelerator.prepare(model, optimizer, schedule)
    try:
        _, _, norm = run_update(accelerator, prepared, optimizer, schedule, [pairs_batch(tokenizer, PAIRS)],
                                update_args(max_grad_norm=0.5), TrainingProgress())
    finally:
        AcceleratorState._reset_state(reset_partial_state=True)
        GradientState._reset_state()
    step = torch.cat([(b - p.detach()).flatten() for b, p in zip(before, model.parameters())]).norm().item()
    assert norm > 0.5, "the test needs a gradient larger than the limit"
    assert step == pytest.approx(0.5, rel=1e-3)


# --- the paper's recipe ----------------------------------------------------------------------------------------------


def test_the_defaults_are_the_papers_recipe():
    data, model_args, args = parse_arguments([])
    assert (args.adam_beta1, args.adam_beta2, args.adam_epsilon) == (0.9, 0.98, 1e-9)
    assert (args.warmup_steps, args.tokens_per_update, args.learning_rate) == (4000, 25000, None)
    assert (model_args.label_smoothing, model_args.dropout) == (0.1, 0.1)
    assert (args.eval_num_beams, args.eval_length_penalty) == (4, 0.6)

    model = VaswaniForConditionalGeneration(tiny_config(d_model=512, encoder_attention_heads=8,
                                                        decoder_attention_heads=8))
    optimizer, schedule = build_optimizer_and_schedule(model, 512**-0.5 * 4000**-0.5, 4000)
    assert optimizer.param_groups[0]["betas"] == (0.9, 0.98) and optimizer.param_groups[0]["eps"] == 1e-9
    paper = lambda step: 512**-0.5 * min(step**-0.5, step * 4000**-1.5)  # noqa: E731
    rates = {}
    for step in range(1, 16001):  # the rate used by update number `step`
        rates[step] = optimizer.param_groups[0]["lr"]
        optimizer.step()
        schedule.step()
    for step in (1, 2, 1000, 4000, 4001, 16000):
        assert rates[step] == pytest.approx(paper(step), rel=1e-9)


def test_a_cooldown_anneals_the_last_updates_to_zero_and_leaves_the_rest_alone():
    model = VaswaniForConditionalGeneration(tiny_config())
    plain_optimizer, plain_schedule = build_optimizer_and_schedule(model, 1e-3, 10)
    optimizer, schedule = build_optimizer_and_schedule(model, 1e-3, 10, max_steps=100, cooldown_steps=30)
    plain, cooled = {}, {}
    for step in range(1, 101):
        plain[step], cooled[step] = plain_optimizer.param_groups[0]["lr"], optimizer.param_groups[0]["lr"]
        for opt, sched in ((plain_optimizer, plain_schedule), (optimizer, schedule)):
            opt.step()
            sched.step()
    assert all(cooled[step] == plain[step] for step in range(1, 71))  # warmup and decay untouched
    assert cooled[71] == pytest.approx(plain[71] * 30 / 31)
    assert cooled[100] == pytest.approx(plain[100] / 31) and cooled[100] > 0  # the last update still moves
    assert all(cooled[step + 1] < cooled[step] for step in range(70, 100))
    assert optimizer.param_groups[0]["lr"] == 0.0  # an update past max_steps would not move the weights

    with pytest.raises(ValueError, match="A cooldown needs max_steps"):
        build_optimizer_and_schedule(model, 1e-3, 10, cooldown_steps=30)
    with pytest.raises(ValueError, match=r"--cooldown_steps must be between 0 and --max_steps \(100\), got 101"):
        parse_arguments(["--max_steps", "100", "--warmup_steps", "10", "--cooldown_steps", "101"])
    # a run shorter than its warmup is allowed, with or without a cooldown (the factors multiply)
    parse_arguments(["--max_steps", "3", "--warmup_steps", "4000"])
    parse_arguments(["--max_steps", "3", "--warmup_steps", "4000", "--cooldown_steps", "3"])
    with pytest.raises(ValueError, match=r"--cooldown_steps must be between 0 .* got -1"):
        parse_arguments(["--cooldown_steps", "-1"])


def test_a_config_file_is_overridden_by_the_command_line(tmp_path):
    config = tmp_path / "experiment.yaml"
    config.write_text("max_steps: 10\ndropout: 0.3\nconfig_overrides: {encoder_layers: 1, layer_norm_position: pre}\n"
                      "source_column: document\n")
    data, model_args, args = parse_arguments(["--config", str(config), "--max_steps", "20"])
    assert (args.max_steps, model_args.dropout, data.source_column) == (20, 0.3, "document")
    assert model_args.config_overrides == "encoder_layers=1,layer_norm_position=pre"  # as the command line gives them
    _, model_args, _ = parse_arguments(["--config", str(config), "--config_overrides", "encoder_layers=3"])
    assert parse_config_overrides(model_args.config_overrides) == {"encoder_layers": 3}

    config.write_text("max_step: 10\n")
    with pytest.raises(ValueError, match=r"unknown option 'max_step'; did you mean 'max_steps'\?"):
        load_config_file(str(config))
    with pytest.raises(ValueError, match=r"--config_overrides: 'layers' is not of the form key=value"):
        parse_arguments(["--config_overrides", "layers"])
    with pytest.raises(ValueError, match=r"Set dropout with --dropout, not inside --config_overrides"):
        parse_arguments(["--config_overrides", "d_model=64,dropout=0.3"])


def test_training_data_named_on_the_command_line_replace_the_configs(tmp_path, monkeypatch):
    config = tmp_path / "experiment.yaml"
    config.write_text("train_file: data/train.jsonl\nvalidation_file: data/validation.jsonl\n")
    data, _, _ = parse_arguments(["--config", str(config), "--dataset_name", "bentrevett/multi30k"])
    assert (data.train_file, data.dataset_name) == (None, "bentrevett/multi30k")
    assert data.validation_file == "data/validation.jsonl"  # the validation file stays, as the config comments say
    monkeypatch.chdir(REPO)
    data, _, _ = parse_arguments(["--config", "scripts/configs/quickstart.yaml", "--train_file", "mine.jsonl"])
    assert (data.train_file, data.dataset_name) == ("mine.jsonl", None)
    assert parse_arguments([])[0].dataset_name == "synthetic"  # neither: the toy task, as before


def test_an_old_style_config_and_command_line_still_work_with_a_warning_each(tmp_path, capsys):
    train_file = write_jsonl(tmp_path / "train.jsonl", [{"en": f"s {i}", "de": f"t {i}"} for i in range(8)])
    config = tmp_path / "old.yaml"
    config.write_text(f"dataset: {train_file}\nvalidation_dataset: {train_file}\nmax_eval_examples: 3\n"
                      "model_overrides: {encoder_layers: 1, layer_norm_position: pre}\n")
    data, model_args, _ = parse_arguments(["--config", str(config), "--max_train_examples", "5",
                                           "--dataset_config", "de-en"])
    assert (data.train_file, data.dataset_name, data.validation_file) == (str(train_file), None, str(train_file))
    assert (data.max_train_samples, data.max_eval_samples, data.dataset_config_name) == (5, 3, "de-en")
    assert parse_config_overrides(model_args.config_overrides) == {"encoder_layers": 1, "layer_norm_position": "pre"}
    warnings = capsys.readouterr().err.splitlines()
    assert warnings == [
        "train.py: warning: --max_train_examples is deprecated (removed in the next release); use --max_train_samples",
        "train.py: warning: --dataset_config is deprecated (removed in the next release); use --dataset_config_name",
        f"train.py: warning: dataset (in {config}) is deprecated (removed in the next release); use train_file",
        f"train.py: warning: validation_dataset (in {config}) is deprecated (removed in the next release); use "
        "validation_file",
        f"train.py: warning: max_eval_examples (in {config}) is deprecated (removed in the next release); use "
        "max_eval_samples",
        f"train.py: warning: model_overrides (in {config}) is deprecated (removed in the next release); use "
        "config_overrides encoder_layers=1,layer_norm_position=pre",
    ]
    data, model_args, _ = parse_arguments(["--dataset", "synthetic", "--model_overrides", '{"d_model": 64}'])
    assert (data.dataset_name, model_args.config_overrides) == ("synthetic", "d_model=64")
    assert capsys.readouterr().err.splitlines() == [
        "train.py: warning: --dataset is deprecated (removed in the next release); use --dataset_name",
        "train.py: warning: --model_overrides is deprecated (removed in the next release); use --config_overrides "
        "d_model=64",
    ]
    with pytest.raises(ValueError, match=r"--model_overrides must be a JSON object"):
        parse_arguments(["--model_overrides", "{layers: 2"])
    config.write_text(f"dataset: {train_file}\ntrain_file: other.jsonl\n")
    with pytest.raises(ValueError, match=rf"dataset: {re.escape(str(train_file))} in .*old.yaml and train_file: "
                                         r"other.jsonl in .*old.yaml would both set train_file"):
        parse_arguments(["--config", str(config)])


# --- a complete run: outputs, logs, models ---------------------------------------------------------------------------


def test_a_run_logs_metrics_tensorboard_curves_and_a_summary(finished_run):
    output_dir, summary = finished_run
    records = metrics_records(output_dir)
    training = [r for r in records if "loss" in r]
    assert [r["step"] for r in training] == list(range(1, 9))
    assert all(r["tokens_per_second"] > 0 and r["learning_rate"] > 0 for r in training)
    assert training[-1]["loss"] < training[0]["loss"], "the loss must fall"
    evaluations = [r for r in records if "val_loss" in r]
    assert [r["step"] for r in evaluations] == [4, 8]
    assert all(r["bleu_signature"].startswith("nrefs:1|case:mixed|") for r in evaluations)
    assert list((output_dir / "tensorboard").rglob("events.out.tfevents.*"))
    assert (output_dir / "training_curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert json.loads((output_dir / "summary.json").read_text()) == json.loads(json.dumps(summary))
    assert summary["steps"] == 8 and summary["tokens_per_second"] > 0
    best = max(evaluations, key=lambda r: r["bleu"])
    assert summary["best_score"] == best["bleu"] and summary["best_step"] == best["step"]


def test_best_and_last_models_load_with_auto_classes_and_the_pipeline(finished_run):
    output_dir, _ = finished_run
    for name in ("best", "last"):
        model = AutoModelForSeq2SeqLM.from_pretrained(output_dir / name)
        tokenizer = AutoTokenizer.from_pretrained(output_dir / name)
        assert model.config.source_lang is None and model.generation_config.num_beams == 2
    last = load_file(output_dir / "last" / "model.safetensors")
    newest = load_file(latest_checkpoint(output_dir / "checkpoints") / "model" / "model.safetensors")
    assert all(torch.equal(last[k], newest[k]) for k in last)
    translator = pipeline("translation", model=str(output_dir / "last"), tokenizer=tokenizer, trust_remote_code=True)
    assert isinstance(translator("The dog sees a cat.")[0]["translation_text"], str)


def test_only_the_last_checkpoints_are_kept(finished_run):
    output_dir, _ = finished_run
    assert [step for step, _ in list_checkpoints(output_dir / "checkpoints")] == [4, 6, 8]
    assert not [p for p in (output_dir / "checkpoints").iterdir() if p.name.startswith(".")]


def test_average_checkpoints_is_the_mean_and_loads(finished_run, tmp_path):
    output_dir, _ = finished_run
    averaged = average_checkpoints.main(["--run_dir", str(output_dir), "--last", "2", "--output_dir",
                                         str(tmp_path / "averaged")])
    model = AutoModelForSeq2SeqLM.from_pretrained(averaged)
    AutoTokenizer.from_pretrained(averaged)
    six, eight = (load_file(checkpoints_module.checkpoint_path(output_dir / "checkpoints", s) / "model" /
                            "model.safetensors") for s in (6, 8))
    weights = model.state_dict()
    for name in six:
        torch.testing.assert_close(weights[name], (six[name] + eight[name]) / 2)
    assert not torch.equal(six["model.shared.weight"], eight["model.shared.weight"])
    # the averaged model says what it is, for the conventions beside its scores
    record = json.loads((averaged / checkpoints_module.AVERAGING_RECORD).read_text())
    assert record["steps"] == [6, 8]
    assert checkpoints_module.weights_provenance(str(averaged)) == (
        "the mean of 2 checkpoints (updates 6, 8; scripts/average_checkpoints.py)")
    assert "no checkpoint averaging" in checkpoints_module.weights_provenance(str(output_dir / "last"))
    with pytest.raises(ValueError, match="either --run_dir"):
        average_checkpoints.main(["--output_dir", str(tmp_path / "x")])


def test_an_average_of_folders_that_are_not_checkpoints_names_them(tmp_path):
    folders = [tmp_path / "run_a" / "best", tmp_path / "run_b" / "best"]
    checkpoints_module.write_averaging_record(tmp_path, folders)
    assert checkpoints_module.weights_provenance(str(tmp_path)) == (
        f"the mean of 2 checkpoints ({folders[0]}, {folders[1]}; scripts/average_checkpoints.py)")


def test_a_run_refuses_a_folder_that_holds_another_run(finished_run):
    output_dir, _ = finished_run
    with pytest.raises(TrainingError, match=r"already holds a run .*--resume.*--overwrite_output_dir"):
        run_in_process(tiny_argv(output_dir))


def test_summarization_is_scored_with_rouge_and_counts_distinct_outputs(tmp_path, capsys):
    rows = [{"document": f"Anna: I will bring {n} cakes tomorrow.\nBen: Great!", "summary": f"Anna brings {n} cakes."}
            for n in ("two", "three", "four", "five", "six", "seven")] * 8
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    outcome = run_in_process(tiny_argv(tmp_path / "out", train_file=str(train_file), validation_file=str(train_file),
                                       task="summarization", source_column="document", target_column="summary",
                                       max_steps=2, eval_steps=2, too_long="truncate"))
    evaluation = [r for r in metrics_records(tmp_path / "out") if "val_loss" in r][-1]
    assert {"rouge1", "rouge2", "rougeL", "rougeLsum"} <= evaluation.keys()
    assert outcome.summary["best_metric"] == "rougeL"
    assert evaluation["distinct_inputs"] == 6 and 1 <= evaluation["distinct_outputs"] <= 6
    assert f"distinct outputs {evaluation['distinct_outputs']} of 6 inputs" in capsys.readouterr().out


def test_a_model_whose_outputs_do_not_depend_on_the_input_is_warned_about(tmp_path, capsys):
    # every dialogue has the same summary: the model learns to write it without reading the dialogue
    rows = [{"document": f"Anna: I will bring {n} cakes tomorrow.\nBen: Great!", "summary": "Anna brings cakes."}
            for n in ("two", "three", "four", "five", "six", "seven")] * 8
    train_file = write_jsonl(tmp_path / "train.jsonl", rows)
    run_in_process(tiny_argv(tmp_path / "out", train_file=str(train_file), validation_file=str(train_file),
                             task="summarization", source_column="document", target_column="summary",
                             max_steps=8, eval_steps=8, too_long="truncate"))
    evaluation = [r for r in metrics_records(tmp_path / "out") if "val_loss" in r][-1]
    assert evaluation["distinct_inputs"] == 6 and evaluation["distinct_outputs"] < 3
    assert "warning" not in evaluation  # the metrics file holds numbers; the warning is printed
    assert (f"WARNING at update 8: The outputs do not depend on the input: {evaluation['distinct_outputs']} distinct "
            "output(s) for 6 distinct inputs") in capsys.readouterr().out


def test_early_stopping_stops_after_the_patience_runs_out(tmp_path):
    # a learning rate too small to change anything: the validation loss never improves after the first evaluation
    outcome = run_in_process(tiny_argv(tmp_path, learning_rate=1e-12, max_steps=40, eval_steps=2,
                                       best_metric="loss", early_stopping_patience=2))
    assert outcome.summary["steps"] == 6
    assert "early stopping" in outcome.summary["stopped_because"]
    assert outcome.summary["best_step"] == 2


@pytest.mark.parametrize("precision, checkpointing", [("bf16", False), ("fp16", False), ("no", True)],
                         ids=["bf16", "fp16", "fp32 with activation checkpointing"])
def test_mixed_precision_and_activation_checkpointing_train(tmp_path, precision, checkpointing):
    outcome = run_in_process(tiny_argv(tmp_path, mixed_precision=precision, max_steps=3, eval_steps=3,
                                       save_steps=3, gradient_checkpointing=checkpointing))
    assert outcome.model.is_activation_checkpointing == checkpointing
    assert outcome.summary["mixed_precision"] == precision
    assert all(math.isfinite(r["loss"]) for r in metrics_records(tmp_path) if "loss" in r)
    AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "last")


def test_torch_compile_trains_through_one_compiled_graph_giving_eagers_losses(tmp_path, monkeypatch):
    """--torch_compile with the `eager` backend (dynamo captures each update's forward with fullgraph, without
    inductor's code generation, minutes on a shared CPU; a GPU run gets inductor), against the same run with the
    compilation taken out (the same padded batches, eager updates)."""
    from torch._dynamo.utils import counters

    from vaswani.training import loop as loop_module

    options = dict(dropout=0.0, max_steps=4, eval_steps=4, save_steps=4, torch_compile=True)
    monkeypatch.setattr(loop_module, "COMPILE_BACKEND", "eager")
    torch._dynamo.reset()
    counters.clear()
    with torch._dynamo.config.patch(recompile_limit=4, fail_on_recompile_limit_hit=True):
        run_in_process(tiny_argv(tmp_path / "compiled", **options))
    assert 1 <= counters["stats"]["unique_graphs"] <= 4 and not counters["graph_break"]
    monkeypatch.setattr(loop_module, "compiled_for_updates", lambda accelerator, model: model)
    run_in_process(tiny_argv(tmp_path / "eager", **options))
    compiled, eager = ([r["loss"] for r in metrics_records(tmp_path / name) if "loss" in r] for name in
                       ("compiled", "eager"))
    assert len(compiled) == 4 and compiled == pytest.approx(eager, rel=1e-4)


def test_the_quickstart_config_runs_and_translates(tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)
    output_dir = tmp_path / "quickstart"
    run_in_process(["--config", "scripts/configs/quickstart.yaml", "--output_dir", str(output_dir),
                    "--max_steps", "2", "--synthetic_train_size", "300", "--synthetic_validation_size", "10",
                    "--max_eval_samples", "2", "--report_to", "none"])
    translator = pipeline("translation", model=str(output_dir / "best"), trust_remote_code=True)
    assert isinstance(translator("The dog sees a cat.")[0]["translation_text"], str)


# --- checkpoints and faults -------------------------------------------------------------------------------------------


def test_kill_during_a_save_then_resume_gives_the_weights_of_an_uninterrupted_run(tmp_path):
    options = dict(max_steps=8, save_steps=2, eval_steps=100, dropout=0.1)  # dropout on: the RNG state must resume
    run_in_process(tiny_argv(tmp_path / "straight", **options))

    interrupted = tmp_path / "interrupted"
    killed = run_script(tiny_argv(interrupted, debug_kill_at_step=5, debug_kill_during_save=True, **options),
                        check=False)
    assert killed.returncode == -9, killed.stderr[-2000:]  # SIGKILL
    leftovers = [p.name for p in (interrupted / "checkpoints").iterdir()]
    assert ".tmp-step-00000005" in leftovers, "the kill must come in the middle of a save"
    assert latest_checkpoint(interrupted / "checkpoints").name == "step-00000004"

    progress_file = interrupted / "checkpoints" / "step-00000004" / "training_progress.json"
    before_the_kill = json.loads(progress_file.read_text())["progress"]["wall_seconds"]
    assert before_the_kill > 0
    resume_started = time.perf_counter()
    resumed = run_script(tiny_argv(interrupted, resume=True, **options))
    resume_seconds = time.perf_counter() - resume_started
    assert "Resumed from" in resumed.stdout and "step-00000004: update 4" in resumed.stdout
    # the summary's wall time is the whole run's: the part before the checkpoint, and the resumed process
    wall_seconds = json.loads((interrupted / "summary.json").read_text())["wall_seconds"]
    assert before_the_kill < wall_seconds <= before_the_kill + resume_seconds
    straight = load_file(tmp_path / "straight" / "last" / "model.safetensors")
    again = load_file(interrupted / "last" / "model.safetensors")
    for name in straight:
        torch.testing.assert_close(again[name], straight[name], rtol=1e-6, atol=1e-7)
    steps = [r["step"] for r in metrics_records(interrupted) if "loss" in r]
    assert steps == list(range(1, 9)), "the log keeps each update once"


# --- resuming from a checkpoint that may not be what it seems -------------------------------------------------------


class RunsCode:
    """A pickle that runs code when it is loaded: what a crafted checkpoint file would hold."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "code ran"))


@pytest.fixture(scope="module")
def checkpointed_run(tmp_path_factory):
    """A run of 4 updates with checkpoints at 2 and 4, to copy and tamper with."""
    output_dir = tmp_path_factory.mktemp("checkpointed")
    run_in_process(tiny_argv(output_dir, max_steps=4, save_steps=2, eval_steps=100, dropout=0.1))
    return output_dir


def copy_of(run: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(run, tmp_path / "run"))


def test_a_crafted_pickle_in_every_file_of_the_checkpoints_runs_nothing(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    marker = tmp_path / "pwned"
    for checkpoint in (run / "checkpoints").iterdir():
        for path in [p for p in checkpoint.rglob("*") if p.is_file()] + [checkpoint / "custom_checkpoint_0.pkl"]:
            torch.save(RunsCode(marker), path)  # every file, the weights and the JSON records included
    with pytest.raises(CheckpointError) as caught:
        run_in_process(tiny_argv(run, max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True))
    assert not marker.exists()
    message = str(caught.value)
    assert "no checkpoint can be continued from exactly" in message and "Nothing was loaded" in message
    assert "step-00000004: training_progress.json cannot be read" in message


def test_a_crafted_optimizer_state_is_refused_without_running_it(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    marker = tmp_path / "pwned"
    torch.save(RunsCode(marker), run / "checkpoints" / "step-00000004" / "optimizer.bin")
    with pytest.raises(CheckpointError, match=r"step-00000004 cannot be loaded \(it holds objects other than tensors "
                                              r"and plain data, which are refused: no code in it ran\). Remove that "
                                              r"folder to resume from the one before it"):
        run_in_process(tiny_argv(run, max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True))
    assert not marker.exists()


def test_a_checkpoint_of_an_earlier_version_with_a_pickled_progress_is_named_not_loaded(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    for checkpoint in (run / "checkpoints").iterdir():
        (checkpoint / "training_progress.json").rename(checkpoint / "custom_checkpoint_0.pkl")
    with pytest.raises(CheckpointError, match=r"custom_checkpoint_0.pkl, a pickle written by an earlier version"):
        run_in_process(tiny_argv(run, max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True))


@pytest.mark.parametrize("damage", ["random state missing", "weights truncated"])
def test_a_damaged_newest_checkpoint_is_named_and_the_one_before_is_used(checkpointed_run, tmp_path, capsys, damage):
    run = copy_of(checkpointed_run, tmp_path)
    newest = run / "checkpoints" / "step-00000004"
    if damage == "random state missing":
        (newest / "random_states_0.pkl").unlink()
        reason = "random_states_0.pkl is missing"
    else:
        weights = newest / "model.safetensors"
        weights.write_bytes(weights.read_bytes()[:100])
        reason = "model.safetensors is damaged"
    run_in_process(tiny_argv(run, max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True))
    out = capsys.readouterr().out
    assert f"WARNING: --resume does not use {newest}: {reason}" in out
    assert "Resumed from" in out and "step-00000002: update 2" in out


def test_a_metrics_log_cut_by_a_kill_resumes_and_a_broken_line_is_named(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    log = run / "metrics.jsonl"
    lines = log.read_text().splitlines()
    log.write_text("\n".join(lines) + "\n" + lines[-1][:40])  # a write cut half-way
    run_in_process(tiny_argv(run, max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True))
    assert [r["step"] for r in metrics_records(run) if "loss" in r] == list(range(1, 7))
    lines = log.read_text().splitlines()
    log.write_text("\n".join([lines[0], "{not json", *lines[1:]]) + "\n")
    with pytest.raises(TrainingError, match=rf"{log}, line 2: not a metrics record"):
        run_in_process(tiny_argv(run, max_steps=8, save_steps=2, eval_steps=100, dropout=0.1, resume=True))


def test_options_the_checkpoint_fixes_cannot_change_on_resume_and_the_learning_rate_can(checkpointed_run, tmp_path):
    run = copy_of(checkpointed_run, tmp_path)
    options = dict(max_steps=6, save_steps=2, eval_steps=100, resume=True)
    with pytest.raises(TrainingError, match=r"these options differ from the run's.*--dropout 0.1 -> 0.2.*"
                                            r"--tokens_per_update 512 -> 1024"):
        run_in_process(tiny_argv(run, dropout=0.2, tokens_per_update=1024, **options))
    assert [step for step, _ in list_checkpoints(run / "checkpoints")] == [2, 4]  # nothing written
    # a new peak learning rate takes effect from the update resumed at (peak 3e-3 -> 1e-3 after 4 warmup updates;
    # the rate logged at update k is the one of update k + 1)
    run_in_process(tiny_argv(run, dropout=0.1, **{**options, "learning_rate": 1e-3}))
    rates = {r["step"]: r["learning_rate"] for r in metrics_records(run) if "learning_rate" in r}
    assert rates[4] == pytest.approx(3e-3 * (4 / 5) ** 0.5) and rates[5] == pytest.approx(1e-3 * (4 / 6) ** 0.5)


def test_a_checkpoint_saved_with_the_option_names_of_the_last_release_resumes(checkpointed_run, tmp_path, capsys):
    run = copy_of(checkpointed_run, tmp_path)
    old_names = {"dataset_name": "dataset", "dataset_config_name": "dataset_config", "validation_file":
                 "validation_dataset", "max_train_samples": "max_train_examples", "max_eval_samples":
                 "max_eval_examples", "config_overrides": "model_overrides"}
    for record in [run / "arguments.json", *(run / "checkpoints").glob("step-*/arguments.json")]:
        saved = json.loads(record.read_text())
        assert saved.pop("train_file") is None and saved["dataset_name"] == "synthetic"
        saved = {old_names.get(name, name): value for name, value in saved.items()}
        saved["model_overrides"] = '{"attention_dropout": 0.0}'  # the default: the same model
        record.write_text(json.dumps(saved))
    options = dict(max_steps=6, save_steps=2, eval_steps=100, dropout=0.1, resume=True)
    with pytest.raises(TrainingError, match=r"--config_overrides 'attention_dropout=0.0' -> 'attention_dropout=0.1'"):
        run_in_process(tiny_argv(run, config_overrides="attention_dropout=0.1", **options))
    run_in_process(tiny_argv(run, config_overrides="attention_dropout=0.0", **options))
    assert "Resumed from" in capsys.readouterr().out
    assert [r["step"] for r in metrics_records(run) if "loss" in r] == list(range(1, 7))
    written = json.loads((run / "arguments.json").read_text())  # the run's record now, in today's names
    assert written["dataset_name"] == "synthetic" and written["config_overrides"] == "attention_dropout=0.0"
    assert not set(old_names.values()) & set(written)


def test_a_checkpoint_from_before_torch_compile_resumes_only_without_it():
    """--torch_compile pads the batches to a few shapes: other batches. A checkpoint written before the option existed
    trained on unpadded batches, so it continues without it and is refused with it."""
    from vaswani.training.arguments import options_changed_on_resume

    older = {"dropout": 0.1}  # no torch_compile recorded
    assert options_changed_on_resume(older, {"dropout": 0.1, "torch_compile": False}) == []
    assert options_changed_on_resume(older, {"dropout": 0.1, "torch_compile": True}) == ["--torch_compile False -> True"]


# --- one writer per output folder ----------------------------------------------------------------------------------


def test_two_runs_started_together_on_one_folder_one_is_refused_naming_the_other(tmp_path):
    # both long enough that the one that gets the folder is still training when the other one asks for it
    argv = [sys.executable, str(REPO / "scripts" / "train.py"),
            *tiny_argv(tmp_path / "run", max_steps=100_000, save_steps=100_000, eval_steps=100_000)]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    runs = [subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env)
            for _ in range(2)]
    try:
        finished = None
        while finished is None:  # the refused one exits within seconds; the other trains until it is stopped
            for run in runs:
                try:
                    run.wait(timeout=0.5)
                    finished = run
                    break
                except subprocess.TimeoutExpired:
                    pass
        other = runs[1] if finished is runs[0] else runs[0]
        assert other.poll() is None, "exactly one of the two runs may write in the folder"
        stderr = finished.stderr.read()
        assert finished.returncode == 1, stderr[-3000:]
        assert f"is in use by another run: process {other.pid} on " in stderr
        assert "Traceback" not in stderr
    finally:
        for run in runs:
            run.kill()
            run.wait()


def test_processes_launched_without_a_process_group_are_refused_before_touching_the_folder(tmp_path, monkeypatch):
    # what torchrun sets; without ACCELERATE_USE_CPU on a machine without GPUs, each process would train alone
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(TrainingError, match=r"Launched as 2 processes \(WORLD_SIZE=2\), but they would each train "
                                            r"alone \(Accelerate sees 1\).*ACCELERATE_USE_CPU=1"):
        run_in_process(tiny_argv(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_a_lock_left_by_a_killed_run_is_named_and_taken_over(tmp_path, capsys):
    tmp_path.mkdir(exist_ok=True)
    (tmp_path / ".run.lock").write_text(json.dumps({"pid": 999999, "host": "elsewhere", "started": "yesterday"}))
    run_in_process(tiny_argv(tmp_path, max_steps=2, save_steps=100, eval_steps=100))
    out = capsys.readouterr().out
    assert (f"Note: the previous run in {tmp_path} (process 999999 on elsewhere, started yesterday (?)) ended "
            "without releasing its lock (killed?); taking the folder over.") in out
    record = json.loads((tmp_path / ".run.lock").read_text())
    assert record["pid"] == os.getpid() and "released" in record  # this run's, let go at its end


def test_a_nan_loss_stops_the_run_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    original = VaswaniForConditionalGeneration.forward
    calls = {"count": 0}

    def forward_that_breaks(self, *args, **kwargs):
        outputs = original(self, *args, **kwargs)
        if self.training and outputs.loss is not None:
            calls["count"] += 1
            if calls["count"] > 6:  # update 4 of 2 micro-batches each
                outputs.loss = outputs.loss * float("nan")
        return outputs

    monkeypatch.setattr(VaswaniForConditionalGeneration, "forward", forward_that_breaks)
    with pytest.raises(TrainingDiverged, match=r"diverged at update 4: the loss is nan.*last good checkpoint is "
                                               r".*step-00000002"):
        run_in_process(tiny_argv(tmp_path, save_steps=2, eval_steps=100))
    assert [s for s, _ in list_checkpoints(tmp_path / "checkpoints")] == [2]
    good = load_file(latest_checkpoint(tmp_path / "checkpoints") / "model" / "model.safetensors")
    assert all(torch.isfinite(t).all() for t in good.values())


def test_an_update_that_blows_up_the_weights_is_never_checkpointed_or_called_good(tmp_path):
    # learning rate 1e10: update 1 multiplies the weights by ~1e10 (still finite); the loss of update 2 is not
    with pytest.raises(TrainingDiverged) as caught:
        run_in_process(tiny_argv(tmp_path, learning_rate=1e10, warmup_steps=1, save_steps=1, eval_steps=100))
    message = str(caught.value)
    assert re.search(r"diverged at update \d+: (the loss is (nan|inf)|the gradient norm is|the update made weights)",
                     message), message
    for _, checkpoint in list_checkpoints(tmp_path / "checkpoints"):  # what --resume could pick
        state = load_file(checkpoint / "model.safetensors")
        assert all(torch.isfinite(t).all() for t in state.values())
        assert str(checkpoint) in message or checkpoint != latest_checkpoint(tmp_path / "checkpoints")
    set_aside = sorted(p.name for p in (tmp_path / "checkpoints").iterdir() if p.name.startswith("diverged-"))
    if "the loss is" in message or "gradient norm" in message:
        # the weights that gave the non-finite loss were saved by the update before: set aside, not "good"
        assert set_aside and f"set aside as {tmp_path / 'checkpoints' / set_aside[-1]}" in message
    latest = latest_checkpoint(tmp_path / "checkpoints")
    assert f"The last good checkpoint is {latest or '(none saved yet)'}." in message


@pytest.mark.parametrize("failure", [errno.ENOSPC, errno.EACCES], ids=["disk full", "not writable"])
def test_a_failed_save_raises_a_clear_error_and_keeps_earlier_checkpoints(tmp_path, monkeypatch, failure):
    original = Accelerator.save_state

    def save_state_that_fails(self, output_dir=None, **kwargs):
        if output_dir.endswith("step-00000004"):
            original(self, output_dir, **kwargs)  # part of it is written, as when a disk fills up
            raise OSError(failure, os.strerror(failure), output_dir)
        return original(self, output_dir, **kwargs)

    monkeypatch.setattr(Accelerator, "save_state", save_state_that_fails)
    with pytest.raises(CheckpointError) as caught:
        run_in_process(tiny_argv(tmp_path, save_steps=2, eval_steps=100))
    message = str(caught.value)
    assert "Could not save the checkpoint of update 4" in message and os.strerror(failure) in message
    assert "the latest complete one is" in message and "step-00000002" in message
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-00000002"]
    AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "checkpoints" / "step-00000002" / "model")


def test_a_full_disk_inside_the_safetensors_writer_is_a_checkpoint_error(tmp_path, monkeypatch):
    from safetensors import SafetensorError

    original = Accelerator.save_state

    def save_state_that_fills_the_disk(self, output_dir=None, **kwargs):
        if output_dir.endswith("step-00000004"):
            raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")
        return original(self, output_dir, **kwargs)

    monkeypatch.setattr(Accelerator, "save_state", save_state_that_fills_the_disk)
    with pytest.raises(CheckpointError, match=r"Could not save the checkpoint of update 4 .*No space left on device"):
        run_in_process(tiny_argv(tmp_path, save_steps=2, eval_steps=100))
    assert [p.name for p in (tmp_path / "checkpoints").iterdir()] == ["step-00000002"]


def test_overwriting_a_folder_refuses_to_delete_the_tokenizer_the_run_was_given(finished_run, tmp_path):
    run = copy_of(finished_run[0], tmp_path)
    with pytest.raises(ValueError, match=r"--output_dir .*run holds --tokenizer .*run/last: writing there would "
                                         r"delete or overwrite"):
        run_in_process(tiny_argv(run, overwrite_output_dir=True, tokenizer=str(run / "last"), vocab_size=None))
    assert (run / "last" / "tokenizer.json").is_file()


def test_an_unwritable_output_folder_is_reported_before_training(tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    result = run_script(tiny_argv(blocker / "run"), check=False)
    assert result.returncode == 1
    assert f"train.py: error: --output_dir {blocker / 'run'} is not writable" in result.stderr
    assert "Traceback" not in result.stderr  # the message, not a stack trace


def test_a_half_swapped_published_model_is_put_back(tmp_path):
    (tmp_path / ".old-best").mkdir()
    (tmp_path / ".old-best" / "config.json").write_text("{}")
    (tmp_path / ".tmp-last").mkdir()
    remove_leftovers(tmp_path)
    assert (tmp_path / "best" / "config.json").is_file()
    assert not (tmp_path / ".tmp-last").exists()


@pytest.mark.parametrize("variable, engine", [("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DEEPSPEED")])
def test_an_engine_the_config_asks_for_that_cannot_engage_stops_the_run(tmp_path, monkeypatch, variable, engine):
    """`accelerate launch --config_file scripts/configs/accelerate_fsdp.yaml` on a machine without GPUs: Accelerate
    would fall back to plain (DDP / single-process) training without a word."""
    monkeypatch.setenv(variable, "true")
    if engine == "DEEPSPEED" and importlib.util.find_spec("deepspeed") is None:
        expected = (ImportError, "DeepSpeed is not installed")  # Accelerate's own message, before ours
    else:
        expected = (TrainingError, rf"asks for {engine} \({variable}=true\), but Accelerate set up NO on cpu: "
                                   rf"{engine} shards the model across GPUs and needs them")
    with pytest.raises(expected[0], match=expected[1]):
        run_in_process(tiny_argv(tmp_path / "run"))
    assert not (tmp_path / "run").exists()


def test_deepspeed_gets_a_micro_batch_size_and_the_runs_accumulation():
    """The token-budget loader has no batch size; without these numbers accelerator.prepare() refuses DeepSpeed.
    (DeepSpeed itself needs GPUs: scripts/README.md, "FSDP and DeepSpeed", says what is checked without them.)"""
    from types import SimpleNamespace

    from accelerate.utils import DeepSpeedPlugin

    from vaswani.training.loop import fit_deepspeed_config

    plugin = DeepSpeedPlugin(zero_stage=2, gradient_clipping=1.0)  # what accelerate_deepspeed.yaml gives
    assert plugin.is_auto("train_micro_batch_size_per_gpu")
    accelerator = SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=plugin))
    fit_deepspeed_config(accelerator, accumulation=3)
    assert plugin.get_value("train_micro_batch_size_per_gpu") == 1
    assert plugin.get_value("gradient_accumulation_steps") == 3
    assert plugin.get_value("zero_optimization.stage") == 2
    fit_deepspeed_config(SimpleNamespace(state=SimpleNamespace(deepspeed_plugin=None)), accumulation=3)  # no engine


def test_without_the_plot_and_tensorboard_extras_a_run_still_finishes(tmp_path, monkeypatch, capsys):
    """matplotlib and tensorboard are extras: without them --report_to auto logs nowhere, the curves are skipped with
    a line saying why, and --report_to tensorboard is refused before the run starts."""
    from vaswani.training import loop

    monkeypatch.setattr(loop, "installed", lambda package: package not in ("matplotlib", "tensorboard"))
    with pytest.raises(TrainingError, match=r"--report_to tensorboard: tensorboard is not installed"):
        run_in_process(tiny_argv(tmp_path / "refused", report_to="tensorboard"))
    assert not (tmp_path / "refused").exists()
    outcome = run_in_process(tiny_argv(tmp_path / "run", report_to="auto", max_steps=2, eval_steps=2, save_steps=2))
    assert outcome.summary["curves_file"] is None and not (tmp_path / "run" / "training_curves.png").exists()
    assert not (tmp_path / "run" / "tensorboard").exists()
    assert "No training_curves.png: matplotlib is not installed" in capsys.readouterr().out
    assert json.loads((tmp_path / "run" / "arguments.json").read_text())["report_to"] == "none"
