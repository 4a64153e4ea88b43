"""scripts/make_denoising_pairs.py: texts cut into pieces, each paired with a copy that has spans of words deleted;
several FILE:COLUMN sources, repeated pieces kept once, a held-out validation part, errors that name the argument."""

import random

import pytest

from helpers import load_script, read_jsonl, write_jsonl


script = load_script("make_denoising_pairs")


def is_subsequence(short: list[str], long: list[str]) -> bool:
    remaining = iter(long)
    return all(word in remaining for word in short)


def test_pieces_split_lines_cut_long_ones_and_drop_short_ones():
    text = "Amanda: I baked cookies.\nJerry: Sure!\none two three four five six seven"
    assert script.pieces(text, min_words=3, max_words=4) == [
        "Amanda: I baked cookies.", "one two three four", "five six seven"
    ]


@pytest.mark.parametrize("length", [2, 3, 10, 41])
def test_delete_spans_removes_the_share_asked_for_and_keeps_the_order(length):
    words = [f"w{index}" for index in range(length)]
    rng = random.Random(length)
    for _ in range(20):
        noisy = script.delete_spans(" ".join(words), rng, deletion_rate=0.3).split()
        deleted = length - len(noisy)
        assert deleted == min(length - 1, max(1, round(0.3 * length)))
        assert is_subsequence(noisy, words)


def test_deleted_words_come_in_spans():
    # with a mean span of 5 words, most deletions of a long text are runs, not isolated words
    words = [f"w{index}" for index in range(200)]
    kept = set(script.delete_spans(" ".join(words), random.Random(0), 0.3, mean_span=5.0).split())
    gone = [index for index, word in enumerate(words) if word not in kept]
    isolated = [index for index in gone if index - 1 not in gone and index + 1 not in gone]
    assert len(gone) == 60 and len(isolated) < 15


def test_writes_pairs_from_several_sources(tmp_path):
    reviews = write_jsonl(
        tmp_path / "sst.jsonl",
        [{"text": "a gorgeous , witty , seductive movie ."}, {"text": "too long"}, {"text": "A Gorgeous , witty , seductive movie ."}],
    )
    conll = write_jsonl(tmp_path / "conll.jsonl", [{"tokens": ["EU", "rejects", "German", "call"]}])
    counts = script.main(
        ["--texts", f"{reviews}:text", f"{conll}:tokens", "--output_dir", str(tmp_path / "out"),
         "--validation_size", "1", "--lowercase"]
    )
    # "too long" has two words (dropped); the two reviews differ only in case (kept once, lowercased)
    assert counts == {"pieces": 3, "distinct": 2, "train": 1, "validation": 1}
    rows = read_jsonl(tmp_path / "out" / "train.jsonl") + read_jsonl(tmp_path / "out" / "validation.jsonl")
    assert sorted(row["text"] for row in rows) == ["a gorgeous , witty , seductive movie .", "eu rejects german call"]
    for row in rows:
        assert is_subsequence(row["noisy"].split(), row["text"].split())
        assert 0 < len(row["noisy"].split()) < len(row["text"].split())


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--deletion_rate", "1"], "--deletion_rate must lie strictly between 0 and 1"),
        (["--mean_span", "0"], "--mean_span must be positive"),
        (["--min_words", "1"], "--min_words must be at least 2"),
        (["--min_words", "9", "--max_words", "5"], "at most --max_words"),
        (["--validation_size", "1"], "only 1 distinct pieces"),
        (["--validation_size", "-1"], "--validation_size must be 0 or more"),
    ],
)
def test_bad_arguments_name_the_argument(tmp_path, extra, message):
    data = write_jsonl(tmp_path / "sst.jsonl", [{"text": "a gorgeous , witty , seductive movie ."}])
    with pytest.raises(ValueError, match=message):
        script.main(["--texts", f"{data}:text", "--output_dir", str(tmp_path / "out"), *extra])


@pytest.mark.parametrize("spec, message", [("no-column-given", "FILE:COLUMN pairs"), ("{data}:body", "body")])
def test_bad_sources_are_named(tmp_path, spec, message):
    data = write_jsonl(tmp_path / "sst.jsonl", [{"text": "a gorgeous , witty , seductive movie ."}])
    with pytest.raises(ValueError, match=message):
        script.main(["--texts", spec.format(data=data), "--output_dir", str(tmp_path / "out")])
