"""scripts/make_pseudo_summaries.py: each document paired with its first real sentence, a held-out validation part,
and errors that name the argument."""

import pytest

from helpers import load_script, read_jsonl, write_jsonl
from vaswani.evaluation.extractive import lead_sentence


script = load_script("make_pseudo_summaries")

EMAILS = [
    "Hi Phillip,\nAttached is the Grande Communications Service Agreement. The business points are in Exhibit C.",
    "Bob  Please review the draft contract by Friday!\nThanks,",
    "Team,\n\nThe meeting moves to room 3267 on Tuesday at nine. Bring the numbers.",
    "Ok.",  # no sentence of four words: left out
]


def test_lead_sentence_skips_greetings_and_cuts_to_length():
    assert lead_sentence(EMAILS[0]) == "Attached is the Grande Communications Service Agreement."
    assert lead_sentence(EMAILS[2], max_target_words=4) == "The meeting moves to"
    # a greeting on the same line as the sentence stays: only line and sentence ends split
    assert lead_sentence(EMAILS[1]) == "Bob Please review the draft contract by Friday!"
    assert lead_sentence(EMAILS[3]) is None
    assert lead_sentence(EMAILS[3], min_sentence_words=1) == "Ok."


def test_writes_train_and_held_out_validation(tmp_path):
    data = write_jsonl(tmp_path / "emails.jsonl", [{"document": text, "summary": "unused"} for text in EMAILS])
    counts = script.main(["--train_file", str(data), "--output_dir", str(tmp_path / "out"), "--validation_size", "1"])
    assert counts == {"documents": 4, "train": 2, "validation": 1, "left_out": 1}
    train, validation = read_jsonl(tmp_path / "out" / "train.jsonl"), read_jsonl(tmp_path / "out" / "validation.jsonl")
    assert [row["document"] for row in train + validation] == EMAILS[:3]
    assert validation[0]["summary"] == "The meeting moves to room 3267 on Tuesday at nine."
    assert all(row["summary"] in row["document"].replace("  ", " ") for row in train)
    counts = script.main(["--train_file", str(data), "--max_train_samples", "2", "--output_dir", str(tmp_path / "two"),
                          "--validation_size", "1"])
    assert counts == {"documents": 2, "train": 1, "validation": 1, "left_out": 0}


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--validation_size", "3"], "only 3 of 4 documents have a usable sentence or line"),
        (["--validation_size", "-1"], "--validation_size must be 0 or more"),
        (["--max_target_words", "0"], "--max_target_words must be at least 1"),
        (["--max_train_samples", "0"], "--max_train_samples must be at least 1"),
        (["--column", "body"], "body"),
        (["--reference_column", "subject"], "subject"),
    ],
)
def test_bad_arguments_name_the_argument(tmp_path, extra, message):
    data = write_jsonl(tmp_path / "emails.jsonl", [{"document": text} for text in EMAILS])
    with pytest.raises(ValueError, match=message):
        script.main(["--train_file", str(data), "--output_dir", str(tmp_path / "out"), *extra])


def test_reference_column_scores_the_lead_baseline(tmp_path):
    # the first e-mail's lead is its summary word for word, the second shares nothing with its summary, the third
    # has no lead (an empty prediction): ROUGE-1 averages 100, 0 and 0
    rows = [
        {"document": "Hi,\nThe budget review moves to Friday.", "summary": "The budget review moves to Friday."},
        {"document": "Please send the signed contract today.", "summary": "Lunch plans"},
        {"document": "Ok.", "summary": "Hello"},
    ]
    data = write_jsonl(tmp_path / "emails.jsonl", rows)
    counts = script.main(
        ["--train_file", str(data), "--output_dir", str(tmp_path / "out"), "--validation_size", "0",
         "--reference_column", "summary"]
    )
    assert counts["rouge1"] == pytest.approx(100 / 3, abs=0.01)
    assert counts["rougeL"] == pytest.approx(100 / 3, abs=0.01)
    assert counts["left_out"] == 1
