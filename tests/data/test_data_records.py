"""vaswani.data.loading: data files whose records would fail deep inside the loader, or read the wrong files, are
named in one line with their file and line (issue 67): a .json file holding a scalar, a key given twice, records
nested 100,000 levels deep or longer than any text, a number of thousands of digits, a path with a comma, a link
that loops; and rows of the wrong type, named by every command that reads text (train_tokenizer.py included)."""

import json
import re

import pytest

import vaswani.data.loading
from helpers import PAIRS, REPO, command_in_process, load_script, write_jsonl
from vaswani.data.loading import check_files_exist, load_split


train_tokenizer = load_script("train_tokenizer")


def rows(count=3):
    return [{"en": en, "de": de} for en, de in PAIRS[:count]]


@pytest.mark.parametrize("content, kind", [("5", "a number"), ('"a text"', "a string"), ("true", "true/false"),
                                           ("null", "null")])
def test_a_json_file_holding_a_scalar_is_named(tmp_path, content, kind):
    path = tmp_path / "data.json"
    path.write_text(content + "\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))} holds {kind}, not records: a \.json file holds an "
                                         r"array of record objects"):
        load_split(str(path))


def test_a_json_array_of_scalars_is_named_with_the_item(tmp_path):
    path = tmp_path / "data.json"
    path.write_text(json.dumps([rows(1)[0], 7]))
    with pytest.raises(ValueError, match=r"item 1 of its array is a number"):
        load_split(str(path))


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_key_given_twice_in_a_record_is_named_with_its_line(tmp_path, suffix):
    path = tmp_path / f"data{suffix}"
    lines = [json.dumps(row) for row in rows()]
    lines[1] = '{"en": "A man.", "de": "Ein Mann.", "en": "Another man."}'
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}, line 2: the key 'en' is given twice in one "
                                         "object"):
        load_split(str(path))


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_record_nested_100000_levels_deep_is_named_with_its_line(tmp_path, suffix):
    path = tmp_path / f"data{suffix}"
    deep = '{"en": "A man.", "de": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path.write_text(json.dumps(rows(1)[0]) + "\n" + deep + "\n")
    where = rf"{re.escape(str(path))}, line 2" if suffix == ".jsonl" else re.escape(str(path))
    with pytest.raises(ValueError, match=rf"^{where}: nested more than 64 levels deep"):
        load_split(str(path))


def test_a_line_longer_than_any_record_is_refused_before_it_is_read_whole(tmp_path, monkeypatch):
    """One 1 GiB line ended in a MemoryError inside loading.py: a line is read only up to the bound."""
    monkeypatch.setattr(vaswani.data.loading, "MAX_RECORD_BYTES", 1000, raising=False)  # instead of writing 32 MiB
    path = write_jsonl(tmp_path / "data.jsonl", [*rows(2), {"en": "a" * 2000, "de": "b"}])
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}, line 3: longer than 1,000 bytes"):
        load_split(str(path))


def test_a_number_of_5000_digits_is_named_with_its_file_and_line(tmp_path):
    path = tmp_path / "data.jsonl"
    path.write_text(json.dumps(rows(1)[0]) + '\n{"en": "A man.", "de": ' + "9" * 5000 + "}\n")
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}, line 2: Exceeds the limit \(4300 digits\)"):
        load_split(str(path))


def test_a_file_whose_name_holds_a_comma_is_one_file(tmp_path):
    path = write_jsonl(tmp_path / "a,b.jsonl", rows())
    check_files_exist(str(path), "--train_file")
    assert len(load_split(str(path))) == 3


def test_files_split_on_commas_are_said_to_be(tmp_path):
    """`--train_file 'a,b.jsonl'` was split on the comma without a word: "a: no such file"."""
    given = f"{tmp_path}/a,b.jsonl"
    with pytest.raises(FileNotFoundError, match=rf"--train_file {re.escape(str(tmp_path))}/a: no such file \(--train_file "
                                                rf"{re.escape(given)} is read as 2 files separated by commas"):
        check_files_exist(given, "--train_file")


def test_a_symlink_loop_is_not_called_missing(tmp_path):
    loop = tmp_path / "loop.jsonl"
    loop.symlink_to("loop.jsonl")
    with pytest.raises(FileNotFoundError, match=rf"--train_file {re.escape(str(loop))}: it is a loop of symbolic "
                                                "links"):
        check_files_exist(str(loop), "--train_file")
    dangling = tmp_path / "dangling.jsonl"
    dangling.symlink_to("gone.jsonl")
    with pytest.raises(FileNotFoundError, match=r"it is a symbolic link to gone\.jsonl, which is not there"):
        check_files_exist(str(dangling), "--train_file")


def test_a_model_path_that_loops_is_not_called_missing(tmp_path):
    from vaswani.cli import require_folder_or_hub_id

    loop = tmp_path / "model"
    loop.symlink_to("model")
    with pytest.raises(FileNotFoundError, match=r"--model .*model: it is a loop of symbolic links"):
        require_folder_or_hub_id(str(loop), "--model")


# --- rows of the wrong type, named by train_tokenizer.py ------------------------------------------------------------


@pytest.mark.parametrize("value, held", [
    (5, r"an integer \(5\)"), (["Ein", "Mann"], r"a list \(\['Ein', 'Mann'\]\)"), (None, "null or missing"),
    ("missing", "null or missing"),
], ids=["number", "list", "null", "missing"])
def test_train_tokenizer_names_a_row_that_holds_no_text(tmp_path, value, held):
    """Rows whose text was a number, a list, null or missing were skipped and counted as learned."""
    data = rows(4)
    if value == "missing":
        del data[2]["de"]
    else:
        data[2]["de"] = value
    path = write_jsonl(tmp_path / "train.jsonl", data)
    with pytest.raises(ValueError, match=rf"^{re.escape(str(path))}, row 3: `de` is {held}, not text"):
        train_tokenizer.main(["--train_file", str(path), "--columns", "en", "de", "--vocab_size", "300",
                              "--output_dir", str(tmp_path / "tokenizer")])
    assert not (tmp_path / "tokenizer").exists()


def test_train_tokenizer_names_a_translation_dict_value_that_is_no_text(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", [{"translation": {"en": en, "de": de}} for en, de in PAIRS[:3]]
                       + [{"translation": {"en": "A man.", "de": 3}}])
    with pytest.raises(ValueError, match=r"row 4: `translation.de` is an integer \(3\), not text"):
        train_tokenizer.main(["--train_file", str(path), "--columns", "translation", "--vocab_size", "300",
                              "--output_dir", str(tmp_path / "tokenizer")])


def test_train_tokenizer_says_when_min_frequency_leaves_no_merge(tmp_path):
    """`--min_frequency 1000000000` learned no merges without a word."""
    path = write_jsonl(tmp_path / "train.jsonl", rows(10))
    result = command_in_process(REPO / "scripts" / "train_tokenizer.py", [
        "--train_file", path, "--columns", "en", "de", "--min_frequency", "1000000000", "--output_dir",
        tmp_path / "tokenizer"])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert ("train_tokenizer.py: error: No subword was learned from 10 rows: no pair of characters occurs "
            "--min_frequency 1000000000 times") in result.stderr
    assert not (tmp_path / "tokenizer").exists()


def test_train_tokenizer_still_learns_from_text_rows(tmp_path):
    path = write_jsonl(tmp_path / "train.jsonl", rows(10))
    tokenizer = train_tokenizer.main(["--train_file", str(path), "--columns", "en", "de", "--vocab_size", "320",
                                      "--min_frequency", "2", "--output_dir", str(tmp_path / "tokenizer")])
    assert len(tokenizer) > 260
