"""The tools that measured the WMT recipe's data pipeline (results/wmt14_en_de/notes.md): scripts/tools/
wmt_like_corpus.py writes rows of the Hub's wmt14 de-en schema with WMT-like lengths, the same for a seed;
scripts/tools/measure_command.py times a command's output lines and measures its process tree and folders."""

import json
import sys

from helpers import load_script, read_jsonl

wmt_like_corpus = load_script("tools/wmt_like_corpus")
measure_command = load_script("tools/measure_command")


def test_the_corpus_has_the_hubs_schema_wmt_like_lengths_and_compounds(tmp_path, capsys):
    path = tmp_path / "train.jsonl"
    assert wmt_like_corpus.main(["--pairs", "2000", "--word_types", "20000", "--output_file", str(path)]) == 0
    assert "Wrote" in capsys.readouterr().out and not list(tmp_path.glob("*.tmp"))
    rows = read_jsonl(path)
    assert len(rows) == 2000 and all(list(row) == ["translation"] for row in rows)
    assert all(sorted(row["translation"]) == ["de", "en"] for row in rows)
    english = [len(row["translation"]["en"].split()) for row in rows]
    german = [len(row["translation"]["de"].split()) for row in rows]
    assert 22 < sum(english) / len(rows) < 30 and max(english) <= 200 and min(english) >= 1
    assert sum(german) < sum(english)  # German sentences about 0.95 as long, hyphenated compounds one word each
    assert sum("-" in row["translation"]["de"] for row in rows) > 200
    # the same seed, the same bytes; another seed, other sentences
    again = tmp_path / "again.jsonl"
    wmt_like_corpus.main(["--pairs", "2000", "--word_types", "20000", "--output_file", str(again)])
    assert again.read_bytes() == path.read_bytes()
    wmt_like_corpus.main(["--pairs", "50", "--seed", "1", "--word_types", "20000", "--output_file", str(again)])
    assert read_jsonl(again)[0] != rows[0]


def test_a_command_is_timed_by_its_lines_and_measured(tmp_path, capsys):
    (tmp_path / "folder").mkdir()
    (tmp_path / "folder" / "data").write_bytes(b"x" * 2**20)
    program = "print('ready', flush=True); print('done\\rreally', flush=True)"
    report = tmp_path / "report.json"
    status = measure_command.main(["--mark", "ready=^ready", "--mark", "done=^really", "--mark", "never=absent",
                                   "--disk", str(tmp_path / "folder"), "--json", str(report), "--",
                                   sys.executable, "-c", program])
    assert status == 0
    assert "ready" in capsys.readouterr().out  # the output passes through
    result = json.loads(report.read_text())
    marks = result["marks"]
    assert marks["never"] is None and 0 <= marks["ready"]["second"] <= marks["done"]["second"] <= result["seconds"]
    assert [line for _, line in result["lines"]] == ["ready", "done", "really"]
    assert result["peak_tree_pss_mib"] > 0 and result["largest_process_rss_mib"] > 0
    assert result["disk_mib"] == {str(tmp_path / "folder"): 1}
    assert set(result["load_average_1min"]) == {"min", "mean", "max"}
