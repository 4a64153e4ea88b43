"""scripts/finetune_token_classification.py and vaswani.finetuning.token_alignment: NER fine-tuning with entity-level F1, the
built-in token-classification pipeline with every aggregation strategy, tag checks, and a 2-process evaluation."""

import json

import pytest
import torch
from transformers import AutoModelForTokenClassification, AutoTokenizer, pipeline

from finetune_helpers import run_two_processes, weights
from helpers import NER_LABELS, NER_SENTENCES, QUIET, load_script, ner_rows, save_seq2seq_model, write_jsonl
from vaswani import VaswaniTokenizer
from vaswani.data.label_sets import LabelSet
from vaswani.finetuning.token_alignment import IGNORED, align_word_labels, inside_label_ids, tokenize_and_align


pytestmark = pytest.mark.usefixtures("one_thread")
script = load_script("finetune_token_classification")


@pytest.fixture(scope="module")
def ner_tokenizer():
    """A small vocabulary, so that some words start with a lone "▁" (the case the alignment has to handle)."""
    texts = [text for text, _ in NER_SENTENCES] * 3
    return VaswaniTokenizer.train_from_texts(texts, vocab_size=300, min_frequency=1, model_max_length=128)


@pytest.fixture(scope="module")
def checkpoint(ner_tokenizer, tmp_path_factory):
    return save_seq2seq_model(tmp_path_factory.mktemp("seq2seq"), ner_tokenizer)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ner")
    write_jsonl(folder / "train.jsonl", ner_rows())
    (folder / "labels.json").write_text(json.dumps(NER_LABELS))
    return folder


def args(checkpoint, data, output_dir, *extra):
    return [
        "--model_name_or_path", str(checkpoint), "--train_file", str(data / "train.jsonl"),
        "--validation_file", str(data / "train.jsonl"), "--output_dir", str(output_dir),
        "--per_device_train_batch_size", "5", *QUIET, *extra,
    ]


@pytest.fixture(scope="module")
def tagger(checkpoint, data, tmp_path_factory):
    """A tagger fine-tuned (from the seq2seq checkpoint) on the five sentences, which it then knows by heart."""
    output = tmp_path_factory.mktemp("tagger")
    results = script.main(args(checkpoint, data, output, "--do_train", "--do_eval", "--max_steps", "80",
                               "--learning_rate", "5e-3", "--save_strategy", "no"))
    return output, results


def test_every_piece_of_a_word_is_labelled_and_only_the_first_is_scored(ner_tokenizer):
    labels = LabelSet(tuple(NER_LABELS), "test")
    inside = inside_label_ids(labels)
    assert [labels.names[i] for i in inside] == ["O", "I-PER", "I-PER", "I-ORG", "I-ORG", "I-LOC", "I-LOC",
                                                  "I-MISC", "I-MISC"]
    words = ["Peter", "Blackburn", "lives"]
    tags = [labels.label2id[t] for t in ("B-PER", "I-PER", "O")]
    encoded = tokenize_and_align([words], [tags], ner_tokenizer, 64, inside)
    tokens = ner_tokenizer.convert_ids_to_tokens(encoded["input_ids"][0])
    word_ids = encoded.word_ids(0)
    assert "▁" in tokens, f"the test needs a lone word-start mark: {tokens}"
    names = [labels.names[i] if i != IGNORED else None for i in encoded["labels"][0]]
    for position, word in enumerate(word_ids):
        if word is None:
            assert names[position] is None  # the closing </s>
        elif encoded["first_token"][0][position]:
            assert names[position] == ("B-PER", "I-PER", "O")[word]
        else:
            assert names[position] == ("I-PER", "I-PER", "O")[word]
    assert sum(encoded["first_token"][0]) == len(words)


def test_alignment_of_given_word_ids():
    labels, firsts = align_word_labels([None, 0, 0, 1, 1, 1, None], [1, 5], inside=[0, 2, 2, 4, 4, 6, 6])
    assert labels == [IGNORED, 1, 2, 5, 6, 6, IGNORED]
    assert firsts == [0, 1, 0, 1, 0, 0, 0]


def test_seq2seq_checkpoint_loads_its_encoder_and_names_the_new_classifier(checkpoint, data, tmp_path, caplog):
    output = tmp_path / "out"
    results = script.main(args(checkpoint, data, output, "--do_train", "--max_steps", "1", "--learning_rate", "0",
                               "--save_strategy", "no"))
    report = results["loading_report"]
    assert report["new"] == ["classifier"]
    assert report["unused"] == ["model.decoder.layers"]
    assert "New, randomly initialized (trained by this run): classifier" in caplog.text
    before, after = weights(checkpoint), weights(output)
    for name in ("model.shared.weight", "model.encoder.layers.0.self_attn.q_proj.weight",
                 "model.encoder.layers.1.feed_forward.fc2.bias"):
        assert torch.equal(before[name], after[name]), name


def test_fine_tuning_reaches_full_entity_f1_on_what_it_learned(tagger):
    folder, results = tagger
    assert results["eval_entity_f1"] == 1.0 and results["eval_entity_precision"] == 1.0
    assert results["eval_entity_recall"] == 1.0 and "eval_f1" not in results  # `f1` is text classification's
    config = AutoModelForTokenClassification.from_pretrained(folder).config
    assert [config.id2label[i] for i in range(len(NER_LABELS))] == NER_LABELS


@pytest.mark.parametrize("strategy", ["simple", "first", "average", "max"])
def test_pipeline_groups_entities_with_every_aggregation_strategy(tagger, strategy):
    folder, _ = tagger
    # the folder declares the pipeline that knows where the tokenizer's words start (pipeline_vaswani.py)
    tag = pipeline("token-classification", model=str(folder), aggregation_strategy=strategy, trust_remote_code=True)
    text = "The United Nations met in New York ."
    entities = tag(text)
    assert [entity["entity_group"] for entity in entities] == ["ORG", "LOC"]
    # each entity spans exactly its words
    assert [text[entity["start"]:entity["end"]] for entity in entities] == ["United Nations", "New York"]
    assert [entity["word"] for entity in entities] == ["United Nations", "New York"]


@pytest.mark.parametrize(
    "bad_tag, message",
    [("B-FOO", r"Label 'B-FOO' at row 2 of column 'ner_tags' in .*train.jsonl \(position 1\) is not in the label set"),
     (9, r"Label id 9 at row 2 .*\(position 1\) is outside the label set. The labels .* are ids 0..8")],
)
def test_tag_outside_the_label_set_is_an_error(checkpoint, tmp_path, bad_tag, message):
    rows = ner_rows()
    rows[2]["ner_tags"][1] = bad_tag
    if isinstance(bad_tag, int):  # a column of ids
        rows = [{**row, "ner_tags": [NER_LABELS.index(t) if isinstance(t, str) else t for t in row["ner_tags"]]}
                for row in rows]
    write_jsonl(tmp_path / "train.jsonl", rows)
    (tmp_path / "labels.json").write_text(json.dumps(NER_LABELS))
    with pytest.raises(ValueError, match=message):
        script.main(args(checkpoint, tmp_path, tmp_path / "out", "--do_train", "--max_steps", "1"))


def test_tag_names_come_from_the_data_without_labels_json(checkpoint, tmp_path):
    write_jsonl(tmp_path / "train.jsonl", ner_rows())
    script.main(args(checkpoint, tmp_path, tmp_path / "out", "--do_train", "--max_steps", "1", "--save_strategy", "no"))
    config = AutoModelForTokenClassification.from_pretrained(tmp_path / "out").config
    assert sorted(config.label2id) == sorted(set(NER_LABELS) - {"I-MISC"})  # the tags the five sentences use


def test_empty_evaluation_split_is_an_error(checkpoint, data, tmp_path):
    (tmp_path / "validation.csv").write_text("tokens,ner_tags\n")
    with pytest.raises(ValueError, match=r"The evaluation split .*validation.csv has no rows"):
        script.main(args(checkpoint, data, tmp_path / "out", "--validation_file", str(tmp_path / "validation.csv"),
                         "--do_eval"))


def test_evaluation_batched_by_length_scores_every_sentence_at_its_own_words(tagger, data, tmp_path):
    folder, _ = tagger
    # grouping by length makes Trainer return the sentences in another order than the evaluation set's
    results = script.main(args(folder, data, tmp_path, "--do_eval", "--per_device_eval_batch_size", "2",
                               "--train_sampling_strategy", "group_by_length"))
    assert results["eval_entity_f1"] == 1.0 and results["eval_accuracy"] == 1.0


def test_two_process_evaluation_scores_every_sentence_in_order(tagger, data, tmp_path):
    folder, results = tagger
    # the fine-tuned tagger is perfect on its sentences; on 2 processes a score read at the wrong words would not be
    output = run_two_processes("finetune_token_classification", [
        "--model_name_or_path", str(folder), "--validation_file", str(data / "train.jsonl"),
        "--output_dir", str(tmp_path), "--do_eval", "--per_device_eval_batch_size", "2", *QUIET,
    ])
    evaluation = json.loads((tmp_path / "eval_results.json").read_text())
    assert evaluation["eval_entity_f1"] == results["eval_entity_f1"] == 1.0, output[-3000:]
    assert evaluation["eval_accuracy"] == 1.0
    assert AutoTokenizer.from_pretrained(folder)  # the tagger folder carries its tokenizer


@pytest.mark.parametrize("change, message", [
    (lambda row: row["ner_tags"].pop(), r"row 3: `tokens` has \d+ items and `ner_tags` \d+; they must match"),
    (lambda row: row["ner_tags"].append("O"), r"row 3: `tokens` has \d+ items and `ner_tags` \d+; they must match"),
    (lambda row: row.update(tokens=None), r"row 3: `tokens` is null \(empty\); every row needs a value"),
], ids=["fewer tags than words", "more tags than words", "null words"])
def test_rows_whose_words_and_tags_do_not_pair_up_are_named(checkpoint, tmp_path, change, message):
    (tmp_path / "labels.json").write_text(json.dumps(NER_LABELS))
    rows = ner_rows()
    change(rows[2])
    write_jsonl(tmp_path / "train.jsonl", rows)
    with pytest.raises(ValueError, match=message):
        script.main(args(checkpoint, tmp_path, tmp_path / "out", "--do_train", "--max_steps", "1"))
