"""WMT14 English-German scored as the paper: tokenized cased BLEU with hyphenated compounds split
(`tokenized_bleu_compound_split`, scores known by hand), and outputs bounded by their input's length + 50
(scripts/evaluate_model.py --max_new_tokens_over_input)."""

import importlib.util
from pathlib import Path

import pytest
import sacrebleu

from vaswani.evaluation.metrics import METRIC_TYPES, compute_scores, load_metric, metric_path
from vaswani.evaluation.metrics.names import OPTIONAL_TASK_METRICS
from vaswani.evaluation.scoring import run_bounded_by_input


def _split_compounds():
    path = Path(metric_path("tokenized_bleu")) / "tokenized_bleu.py"
    spec = importlib.util.spec_from_file_location("tokenized_bleu_module", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.split_compounds


@pytest.mark.parametrize("text, split", [
    ("rich-text format", "rich ##AT##-##AT## text format"),
    ("Nord-Süd-Verbindung", "Nord ##AT##-##AT## Süd ##AT##-##AT## Verbindung"),
    # matches do not overlap: the first takes the B, which the second hyphen then lacks on its left
    ("Vitamin-B-Mangel", "Vitamin ##AT##-##AT## B-Mangel"),
    ("Er kam - spät .", "Er kam - spät ."),  # a dash between spaces is no compound
    ("x--y", "x ##AT##-##AT## -y"),
])
def test_a_hyphen_inside_a_word_is_split_off_as_get_ende_bleu_splits_it(text, split):
    assert _split_compounds()(text) == split


REFERENCE = "Er sah den Fernseh-Turm gestern."


def test_compound_split_bleu_is_counted_on_the_split_tokens():
    metric = load_metric("tokenized_bleu")
    paper = dict(lang="de", lowercase=False, normalize=False, compound_split=True)
    # tokens: Er sah den Fernseh ##AT##-##AT## Tower|Turm gestern . (8 each): n-gram matches 7/8, 5/7, 3/6, 2/5,
    # brevity 1: BLEU = (7/8 * 5/7 * 3/6 * 2/5)^(1/4) = (1/8)^(1/4)
    other_part = metric.compute(predictions=["Er sah den Fernseh-Tower gestern."], references=[REFERENCE], **paper)
    assert other_part["score"] == pytest.approx(100 * (1 / 8) ** 0.25)  # 59.46
    assert other_part["signature"].endswith("tok:none|smooth:exp|version:" + sacrebleu.__version__
                                            + "|pretok:moses-tok:de+compound-split")
    # cased: "er" for "Er" costs one match of each order: (7/8 * 6/7 * 5/6 * 4/5)^(1/4) = (1/2)^(1/4); lowercased
    # tokenized BLEU counts nothing against it
    lowercased = ["er sah den Fernseh-Turm gestern."]
    assert metric.compute(predictions=lowercased, references=[REFERENCE], **paper)["score"] == pytest.approx(
        100 * 0.5 ** 0.25)  # 84.09
    assert metric.compute(predictions=lowercased, references=[REFERENCE], lang="de")["score"] == pytest.approx(100)
    # unsplit, the compound is one token that does not match: 5/6, 3/5, 1/4, 0/3 (BLEU 0 without smoothing)
    unsplit = metric.compute(predictions=["Er sah den Fernseh-Tower gestern."], references=[REFERENCE], lang="de",
                             lowercase=False, normalize=False)
    assert unsplit["precisions"][:3] == pytest.approx([100 * 5 / 6, 100 * 3 / 5, 100 * 1 / 4])
    assert unsplit["score"] < other_part["score"]


def test_compound_split_bleu_is_scored_beside_the_others_when_asked():
    scores = compute_scores("translation", ["Er sah den Fernseh-Tower gestern."], [REFERENCE], target_lang="de",
                            compound_split=True)
    assert [score.type for score in scores] == ["sacrebleu", "tokenized_bleu", "tokenized_bleu_compound_split"]
    assert scores[2].name == "BLEU (tokenized, cased, compounds split)"
    assert scores[2].as_entry()["value"] == 59.46 and "compound-split" in scores[2].signature
    assert "tokenized_bleu_compound_split" in METRIC_TYPES
    assert OPTIONAL_TASK_METRICS == {"translation": ("tokenized_bleu_compound_split",)}
    assert [s.type for s in compute_scores("translation", ["a"], ["a"])] == ["sacrebleu", "tokenized_bleu"]
    with pytest.raises(ValueError, match="Compound splitting is a rule of translation BLEU"):
        compute_scores("summarization", ["a"], ["a"], compound_split=True)


class RecordingPipeline:
    """Stands in for the translation pipeline: records the inputs and max_new_tokens of each call."""

    def __init__(self, tokenizer):
        self.tokenizer, self.calls = tokenizer, []

    def __call__(self, texts, batch_size, max_new_tokens, **kwargs):
        self.calls.append((list(texts), max_new_tokens, kwargs))
        return [{"translation_text": text.upper()} for text in texts]


def test_outputs_are_bounded_by_their_batchs_longest_input_plus_the_extra(tokenizer):
    texts = ["A dog.", "A man is riding a horse in the park today.", "Two dogs play.", "A girl reads a book now."]
    lengths = [len(tokenizer(text)["input_ids"]) for text in texts]
    pipe = RecordingPipeline(tokenizer)
    results = run_bounded_by_input(pipe, texts, 2, 50, 1024, num_beams=4)
    assert [result["translation_text"] for result in results] == [text.upper() for text in texts]  # in order
    by_length = sorted(range(4), key=lambda index: -lengths[index])
    expected = [([texts[i] for i in by_length[:2]], lengths[by_length[0]] + 50, {"num_beams": 4}),
                ([texts[i] for i in by_length[2:]], lengths[by_length[2]] + 50, {"num_beams": 4})]
    assert pipe.calls == expected
    # never beyond what the model's positions allow after the start token
    pipe = RecordingPipeline(tokenizer)
    run_bounded_by_input(pipe, texts, 4, 50, 20)
    assert [bound for _, bound, _ in pipe.calls] == [19]
