"""scripts/tools/loss_memory.py: each way of computing the loss measured in a process of its own, both giving the same
loss, a row per size, precision and way, and the rows written to --json."""

import json
import math

from helpers import load_script

loss_memory = load_script("tools/loss_memory")


def test_each_way_is_measured_in_its_own_process_and_both_give_the_same_loss(tmp_path, capsys):
    rows = loss_memory.main(["--tokens", "64", "--vocab_size", "300", "--d_model", "16", "--precisions", "fp32",
                             "--json", str(tmp_path / "rows.json")])
    assert [(row["tokens"], row["precision"], row["way"]) for row in rows] == [(64, "fp32", "full"),
                                                                              (64, "fp32", "chunked")]
    full, chunked = rows
    assert math.isclose(full["loss"], chunked["loss"], rel_tol=1e-5)
    for row in rows:
        assert isinstance(row["peak_mib"], float) and row["peak_mib"] >= 0 and math.isfinite(row["seconds"])
        assert row["logits_mib"] == 64 * 300 * 4 / 2**20
    assert json.loads((tmp_path / "rows.json").read_text()) == rows
    table = capsys.readouterr().out
    assert "| 64 | 300 | 16 | fp32 | full |" in table and "| 64 | 300 | 16 | fp32 | chunked |" in table
