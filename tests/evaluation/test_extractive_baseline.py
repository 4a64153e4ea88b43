"""vaswani.evaluation.extractive and scripts/extractive_baseline.py: summaries taken from the document itself, scored
with ROUGE into a results file that the results table and the model card read like a model's."""

import json

import pytest

from helpers import REPO, SHARED_DATA, load_script, needs_shared_data, write_jsonl
from vaswani.evaluation.extractive import extract, first_lines, longest_lines
from vaswani.evaluation.metrics import rouge_percent
from vaswani.hub import model_card


script = load_script("extractive_baseline")

DIALOGUE = "Anna: Hi!\n\nBen: Are you coming to the party tonight at eight?\nAnna: Yes.\nBen: Great, bring Tom and Kim!\n"


def test_first_and_longest_lines():
    assert first_lines(DIALOGUE, 2) == "Anna: Hi!\nBen: Are you coming to the party tonight at eight?"
    # the two longest, kept in the dialogue's order
    assert longest_lines(DIALOGUE, 2) == "Ben: Are you coming to the party tonight at eight?\nBen: Great, bring Tom and Kim!"
    assert longest_lines("a\nb\nc", 2) == "a\nb"  # equals: the earlier first
    assert first_lines("", 3) == longest_lines("\n \n", 3) == ""
    assert extract("Ok.", "lead_sentence") == ""  # no sentence of 4 words
    with pytest.raises(ValueError, match="Unknown extraction method 'middle'"):
        extract(DIALOGUE, "middle")


def test_the_results_file_has_the_form_of_a_models_and_the_rouge_of_the_extracts(tmp_path):
    rows = [{"document": DIALOGUE, "summary": "Anna is coming to Ben's party tonight."},
            {"document": "Kim: Lunch?\nTom: Sure, at noon.", "summary": "Kim and Tom will have lunch at noon."}]
    data = write_jsonl(tmp_path / "validation.jsonl", rows)
    output = tmp_path / "results" / "evaluation_results.json"
    results = script.main(["--validation_file", str(data), "--dataset_label", "knkarthick/samsum",
                           "--method", "first_lines", "--count", "2", "--output_file", str(output)])
    assert json.loads(output.read_text()) == results
    expected = rouge_percent([first_lines(r["document"], 2) for r in rows], [r["summary"] for r in rows])
    assert [m["value"] for m in results["metrics"]] == [round(expected[m["type"]], 2) for m in results["metrics"]]
    assert results["dataset"] == {"name": "knkarthick/samsum", "config": None, "split": "validation",
                                  "columns": {"source": "document", "target": "summary"}, "num_examples": 2}
    assert results["decoding"] == {} and "the first 2 non-empty lines" in results["conventions"]
    assert model_card.load_results(output)["task"] == "summarization"  # what the table and the card read


@pytest.mark.parametrize("option, value, message", [
    ("--method", "middle", "--method 'middle' is not one of"),
    ("--count", "0", "--count must be at least 1"),
    ("--max_eval_samples", "0", "--max_eval_samples must be at least 1, got 0"),
])
def test_bad_settings_are_errors(tmp_path, option, value, message):
    data = write_jsonl(tmp_path / "validation.jsonl", [{"document": DIALOGUE, "summary": "A party."}])
    argv = ["--validation_file", str(data), "--method", "first_lines", "--output_file", str(tmp_path / "r.json")]
    with pytest.raises(ValueError, match=message):
        script.main(argv + [option, value])


@needs_shared_data
@pytest.mark.parametrize("folder, data, options, floor", [
    ("samsum_first_3", "samsum", ["--method", "first_lines", "--count", "3"], [32.53, 10.07, 25.35]),
    ("samsum_longest_3", "samsum", ["--method", "longest_lines", "--count", "3"], [33.0, 11.1, 25.3]),
    ("aeslc_lead_sentence", "aeslc", ["--method", "lead_sentence", "--max_words", "20"], [17.16, 7.76, 15.76]),
])
def test_the_committed_floors_are_what_the_command_gives(tmp_path, folder, data, options, floor):
    """The baselines of the results table, as first measured (SAMSum's first 3 utterances 32.53 / 10.07 /
    25.35, longest 3 33.0 / 11.1 / 25.3; AESLC's first sentence 17.16 / 7.76 / 15.76), and as committed."""
    results = script.main(["--validation_file", str(SHARED_DATA / data / "validation.jsonl"), *options,
                           "--output_file", str(tmp_path / "results.json")])
    values = [m["value"] for m in results["metrics"]]
    assert values[:3] == pytest.approx(floor, abs=0.05)
    committed = json.loads((REPO / "results" / folder / "evaluation_results.json").read_text())
    assert [m["value"] for m in committed["metrics"]] == values
