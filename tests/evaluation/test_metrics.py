"""vaswani.evaluation.metrics: the local `evaluate` modules answer as their Hub counterparts, tokenized BLEU as the
papers report it, ROUGE in percent; compute_scores gives every task's scores under the project's metric names."""

import gzip
import json
from importlib.metadata import version
from pathlib import Path

import pytest
import sacrebleu
from rouge_score import rouge_scorer

from helpers import SHARED_DATA, needs_shared_data
from vaswani.evaluation.metrics import (
    METRIC_TYPES,
    NAMES,
    TASK_METRICS,
    compute_scores,
    load_metric,
    metric_path,
    rouge_percent,
    score_values,
)
from vaswani.evaluation.metrics.names import OPTIONAL_TASK_METRICS


HYPOTHESES = ["Ein Mann reitet ein Pferd.", "Zwei Hunde spielen im Schnee!", "Ein Mädchen liest."]
REFERENCES = ["Ein Mann reitet auf einem Pferd.", "Zwei Hunde spielen im Schnee.", "Ein Mädchen liest ein Buch."]


@pytest.mark.parametrize("name", NAMES)
def test_metrics_load_from_the_package_under_the_hub_names(name):
    module = load_metric(name)
    assert module.name == name and module.__class__.__module__.split(".")[-1] == name
    assert Path(metric_path(name)).name == name


def test_unknown_metric_lists_the_known_ones():
    with pytest.raises(ValueError, match="sacrebleu"):
        load_metric("meteor")


def test_sacrebleu_matches_the_library_and_gives_its_signature():
    result = load_metric("sacrebleu").compute(predictions=HYPOTHESES, references=[[r] for r in REFERENCES])
    expected = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    assert result["score"] == pytest.approx(expected.score)
    assert result["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|version:")
    lowercase = load_metric("sacrebleu").compute(predictions=HYPOTHESES, references=REFERENCES, lowercase=True)
    assert "case:lc" in lowercase["signature"]


def test_sacrebleu_with_several_references():
    references = [[r, h] for r, h in zip(REFERENCES, HYPOTHESES)]
    assert load_metric("sacrebleu").compute(predictions=HYPOTHESES, references=references)["score"] == pytest.approx(100)
    assert "nrefs:2" in load_metric("sacrebleu").compute(predictions=HYPOTHESES, references=references)["signature"]


def test_tokenized_bleu_tokenizes_and_lowercases_like_the_papers():
    metric = load_metric("tokenized_bleu")
    # case and Moses tokenization do not count against a hypothesis; the escaping of quotes is applied to both sides
    result = metric.compute(predictions=['EIN Mann sagt: "Hallo!"'], references=['ein mann sagt : &quot; hallo ! &quot;'],
                            lang="de", references_tokenized=True)
    assert result["score"] == pytest.approx(100)
    assert result["signature"].endswith("tok:none|smooth:exp|version:" + sacrebleu.__version__
                                        + "|pretok:lc+moses-norm+moses-tok:de")
    shouted = [h.upper() for h in HYPOTHESES]
    assert metric.compute(predictions=shouted, references=HYPOTHESES, lang="de")["score"] == pytest.approx(100)
    assert load_metric("sacrebleu").compute(predictions=shouted, references=HYPOTHESES)["score"] < 10


@needs_shared_data
def test_tokenized_bleu_reproduces_multi30k_tokenized_references():
    folder = SHARED_DATA / "multi30k"
    raw = [json.loads(line)["de"] for line in open(folder / "test_2016_flickr.jsonl", encoding="utf-8")]
    with gzip.open(folder / "tok" / "test_2016_flickr.lc.norm.tok.de.gz", "rt", encoding="utf-8") as handle:
        tokenized = [line.rstrip("\n") for line in handle]
    result = load_metric("tokenized_bleu").compute(
        predictions=raw, references=tokenized, lang="de", references_tokenized=True
    )
    assert result["score"] == pytest.approx(100)
    assert result["sys_len"] == result["ref_len"]


def test_rouge_answers_as_the_hub_module_does():
    """evaluate.load("rouge") on the Hub: no stemming, bootstrap-aggregated mid F-measures in 0-1 by default; one
    F-measure per example with use_aggregator=False; rouge_types picks the keys."""
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=False)
    scores = [scorer.score(r, h) for h, r in zip(HYPOTHESES, REFERENCES)]
    per_example = load_metric("rouge").compute(predictions=HYPOTHESES, references=REFERENCES, use_aggregator=False)
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        assert per_example[key] == [s[key].fmeasure for s in scores]
    aggregated = load_metric("rouge").compute(predictions=HYPOTHESES, references=REFERENCES)
    assert set(aggregated) == {"rouge1", "rouge2", "rougeL", "rougeLsum"}
    assert 0 < aggregated["rouge2"] < aggregated["rouge1"] < 1
    assert aggregated["rouge1"] == pytest.approx(sum(per_example["rouge1"]) / 3, abs=0.05)
    only = load_metric("rouge").compute(predictions=HYPOTHESES, references=REFERENCES, rouge_types=["rougeL"])
    assert set(only) == {"rougeL"}


def test_rouge_percent_is_the_stemmed_mean_in_percent():
    scorer = rouge_scorer.RougeScorer(["rouge1", "rouge2", "rougeL", "rougeLsum"], use_stemmer=True)
    scores = [scorer.score(r, h) for h, r in zip(HYPOTHESES, REFERENCES)]
    result = rouge_percent(HYPOTHESES, REFERENCES)
    for key in ("rouge1", "rouge2", "rougeL", "rougeLsum"):
        assert result[key] == 100 * sum(s[key].fmeasure for s in scores) / 3


def test_accuracy_and_f1():
    assert load_metric("accuracy").compute(predictions=[1, 0, 1, 1], references=[1, 1, 1, 0]) == {"accuracy": 0.5}
    f1 = load_metric("f1")
    # positive class: 2 true positives, 3 predicted, 3 actual -> 2*2/6
    assert f1.compute(predictions=[1, 1, 1, 0], references=[1, 1, 0, 1])["f1"] == pytest.approx(2 / 3)
    # macro over labels 0, 1, 2: F1 = 0, 2/3, 1
    assert f1.compute(predictions=[1, 0, 2], references=[1, 1, 2], average="macro")["f1"] == pytest.approx(5 / 9)
    with pytest.raises(ValueError, match="average"):
        f1.compute(predictions=[1], references=[1], average="sideways")


def test_entity_f1_counts_whole_entities():
    predictions = [["B-PER", "I-PER", "O", "B-LOC"], ["O", "I-ORG", "I-ORG", "O"], ["B-MISC", "B-MISC", "O", "O"]]
    references = [["B-PER", "I-PER", "O", "B-ORG"], ["O", "B-ORG", "I-ORG", "O"], ["B-MISC", "I-MISC", "O", "O"]]
    result = load_metric("seqeval").compute(predictions=predictions, references=references)
    # found: PER, LOC, ORG, MISC, MISC (5); expected: PER, ORG, ORG, MISC (4); correct: PER, ORG (2)
    assert result["overall_precision"] == pytest.approx(2 / 5)
    assert result["overall_recall"] == pytest.approx(2 / 4)
    assert result["overall_f1"] == pytest.approx(2 * 0.4 * 0.5 / 0.9)
    assert result["overall_accuracy"] == pytest.approx(9 / 12)  # tokens 4, 6 and 10 differ
    assert result["ORG"] == {"precision": 1.0, "recall": 0.5, "f1": pytest.approx(2 / 3), "number": 2}
    assert result["MISC"]["precision"] == 0.0


def test_entity_f1_rejects_sequences_of_different_lengths():
    with pytest.raises(ValueError, match="Sequence 0: 2 predicted tags for 3"):
        load_metric("seqeval").compute(predictions=[["O", "O"]], references=[["O", "O", "O"]])


@pytest.mark.parametrize("name", ["sacrebleu", "tokenized_bleu", "rouge", "accuracy", "f1", "seqeval"])
def test_empty_evaluation_set_is_a_clear_error(name):
    with pytest.raises(ValueError, match="empty"):
        load_metric(name).compute(predictions=[], references=[])


def test_translation_scores_are_sacrebleu_and_tokenized_bleu_by_those_names():
    # lowercased outputs: cased sacreBLEU counts the case against them, lowercased BLEU does not
    lowercased = [hypothesis.lower() for hypothesis in HYPOTHESES]
    scores = compute_scores("translation", lowercased, REFERENCES, target_lang="de")
    references = [[r] for r in REFERENCES]
    sacre = load_metric("sacrebleu").compute(predictions=lowercased, references=references)
    tokenized = load_metric("tokenized_bleu").compute(predictions=lowercased, references=references, lang="de")
    assert [(s.type, s.name, s.value, s.signature) for s in scores] == [
        ("sacrebleu", "sacreBLEU", sacre["score"], sacre["signature"]),
        ("tokenized_bleu", "BLEU (tokenized, lowercased)", tokenized["score"], tokenized["signature"]),
    ]
    assert sacre["score"] < tokenized["score"]  # two numbers, two names
    # a results file keeps two digits of a 0-100 score, four of a 0-1 one, and the signature where there is one
    assert scores[1].as_entry() == {"type": "tokenized_bleu", "name": "BLEU (tokenized, lowercased)",
                                    "value": round(tokenized["score"], 2), "signature": tokenized["signature"]}


def test_every_task_is_scored_under_its_names_in_order():
    summaries = compute_scores("summarization", HYPOTHESES, REFERENCES)
    assert score_values(summaries) == rouge_percent(HYPOTHESES, REFERENCES)
    assert {s.signature for s in summaries} == {"rouge-score:" + version("rouge-score")
                                                 + "|stemmer:yes|f-measure|mean-over-examples"}
    binary = compute_scores("text-classification", [1, 1, 1, 0], [1, 1, 0, 1], num_labels=2)
    assert [(s.type, s.name, s.value) for s in binary] == [("accuracy", "Accuracy", 0.5),
                                                           ("f1", "F1 (binary)", pytest.approx(2 / 3))]
    macro = compute_scores("text-classification", [1, 0, 2], [1, 1, 2], num_labels=3)
    assert (macro[1].name, macro[1].value) == ("F1 (macro)", pytest.approx(5 / 9))
    assert macro[1].as_entry() == {"type": "f1", "name": "F1 (macro)", "value": 0.5556}  # no signature
    entities = compute_scores("token-classification", [["B-PER", "O", "B-LOC"]], [["B-PER", "O", "B-ORG"]])
    assert score_values(entities) == {"entity_f1": 0.5, "entity_precision": 0.5, "entity_recall": 0.5,
                                      "accuracy": pytest.approx(2 / 3)}
    for task, scores in (("summarization", summaries), ("text-classification", binary),
                         ("token-classification", entities)):
        assert tuple(s.type for s in scores) == TASK_METRICS[task]
    assert {name for names in (*TASK_METRICS.values(), *OPTIONAL_TASK_METRICS.values()) for name in names} == set(
        METRIC_TYPES)


def test_scoring_an_unknown_task_or_classification_without_its_labels_is_refused():
    with pytest.raises(ValueError, match=r"No metrics for task 'poetry'; the tasks scored are \['translation'"):
        compute_scores("poetry", ["a"], ["a"])
    with pytest.raises(ValueError, match="needs num_labels"):
        compute_scores("text-classification", [1], [1])
