"""scripts/tools/benchmark.py: the Marian model it compares with, the FLOP counts, the kernel profile, the memory
peak and a run of each benchmark."""

import json

import pytest
import torch

from helpers import load_script, needs_shared_data
from vaswani_tools import benchmarking

benchmark = load_script("tools/benchmark")


def trainable(model) -> int:
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


def test_marian_is_built_with_the_identical_architecture():
    for preset in ("tiny", "small", "base"):
        setup = benchmarking.Setup(preset, "fp32", 2, 8, 8, 1000, "cpu")
        ours, marian = benchmarking.vaswani_model(setup), benchmarking.marian_model(setup)
        assert trainable(ours) == trainable(marian), preset
        assert ours.config._attn_implementation == marian.config._attn_implementation == "sdpa"
        assert marian.lm_head.weight is marian.model.shared.weight


def test_training_flops_count_the_matrix_products():
    setup = benchmarking.Setup("tiny", "fp32", 2, 8, 8, 1000, "cpu")
    model = benchmarking.vaswani_model(setup)
    non_embedding = trainable(model) - model.config.vocab_size * model.config.d_model
    flops = benchmarking.training_flops(model.config, setup)
    # 6 FLOPs per weight per token is the usual estimate; ours adds the output projection and attention on top
    rough = 6 * non_embedding * setup.batch_size * setup.source_length
    assert rough < flops < 10 * rough


def test_the_benchmark_runs_and_reports(tmp_path, monkeypatch):
    out = tmp_path / "bench.json"
    # each peak memory is measured in a fresh process (5 s of imports each here): what is measured is checked by
    # test_peak_memory_counts_gradients_and_optimizer_state, which row gets it here
    measured = []
    monkeypatch.setattr(benchmarking, "peak_memory_mb",
                        lambda name, setup: measured.append((name, setup.precision)) or 1000.0 + len(measured))
    benchmark.main(
        ["--presets", "tiny", "--generation-presets", "tiny", "--rounds", "1", "--steps", "1", "--warmup", "0",
         "--batch-size", "4", "--vocab-size", "500", "--new-tokens", "3", "--profile", "--json", str(out)]
    )
    report = json.loads(out.read_text())
    assert report["peak_flops"]["fp32"] > 0
    rows = report["training"]
    assert {row["precision"] for row in rows} <= {"fp32", "bf16"} and rows
    for row in rows:
        assert row["vaswani_target_tokens_per_s"] > 0 and row["marian_target_tokens_per_s"] > 0
        assert row["speedup"] > 0 and 0 < row["vaswani_mfu"]
    assert measured == [(name, row["precision"]) for row in rows for name in ("vaswani", "marian")]
    assert [row[f"{name}_peak_memory_mb"] for row in rows for name in ("vaswani", "marian")] == [
        1000.0 + count for count in range(1, len(measured) + 1)]
    assert {row["num_beams"] for row in report["generation"]} == {1, 4}
    for row in rows + report["generation"]:
        for name in ("vaswani", "marian"):
            # every step of both models multiplies matrices; the shares are of the profiled calls' own time
            assert 0 < row[f"{name}_share_matrix_products"] < 1
            assert 0 <= row[f"{name}_share_attention_kernels"] < 1
            shared = row[f"{name}_share_matrix_products"] + row[f"{name}_share_attention_kernels"]
            assert abs(row[f"{name}_share_other"] - (1 - shared)) < 1e-9
        marian_shared = row["marian_share_matrix_products"] + row["marian_share_attention_kernels"]
        assert abs(row["speedup_ceiling"] - 1 / marian_shared) < 1e-6 and row["speedup_ceiling"] > 1
    if "bf16" not in {row["precision"] for row in rows}:
        assert "bf16" in report["skipped"]  # said, not silently dropped


@needs_shared_data
def test_the_engines_benchmark_times_every_engine_at_every_thread_count(tmp_path):
    """A preset and a shipped model (results/multi30k_en_de/model on Multi30k sentences): every engine timed (the
    package's loop and CTranslate2 also alone, in fresh processes), the package's decoding loop giving generate's
    tokens, the ratios those of the times, the load beside each row."""
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    out = tmp_path / "engines.json"
    threads = torch.get_num_threads()
    try:
        benchmark.main(["--engines", "--workloads", "tiny", "multi30k_en_de", "--threads", "2", "--rounds", "1",
                        "--alone_pairs", "1", "--profile",
                        "--batch-size", "2", "--vocab-size", "500", "--new-tokens", "3", "--json", str(out)])
        assert torch.get_num_threads() == 2  # the count asked for (the script sets it)
    finally:
        torch.set_num_threads(threads)
    rows = json.loads(out.read_text())["engines"]
    assert [json.loads(line.strip().rstrip(",")) for line in out.read_text().splitlines()[4:-2]] == rows  # a line each
    assert [(row["workload"], row["threads"], row["num_beams"]) for row in rows] == [
        ("tiny", 2, 1), ("tiny", 2, 4), ("multi30k_en_de", 2, 1), ("multi30k_en_de", 2, 4)]
    for row in rows:
        engines = [name for name in benchmarking.ENGINES
                   if (name != "marian" or row["workload"] == "tiny")
                   and (name != "default_pipeline" or row["workload"] != "tiny")]  # (a preset has no texts)
        assert all(row[f"{name}_tokens_per_s"] > 0 and row[f"{name}_ms"] > 0 for name in engines)
        assert row["ct2_fp32_alone_tokens_per_s"] > 0 and row["ct2_int8_alone_tokens_per_s"] > 0  # fresh processes
        assert row["cpu_inference_fp32_alone_tokens_per_s"] > 0  # the package's loop in a fresh process too
        assert row["cpu_inference_fp32_alone_vs_ct2_fp32_alone"] == pytest.approx(
            row["cpu_inference_fp32_alone_tokens_per_s"] / row["ct2_fp32_alone_tokens_per_s"])  # one pair: its ratio
        pair = [pytest.approx(row["cpu_inference_fp32_alone_ms"]), pytest.approx(row["ct2_fp32_alone_ms"])]
        assert row["alone_pairs"] == [pair]
        int8_pair = [pytest.approx(row["cpu_inference_int8_alone_ms"]), pytest.approx(row["ct2_int8_alone_ms"])]
        assert row["int8_alone_pairs"] == [int8_pair]
        assert row["cpu_inference_int8_alone_vs_ct2_int8_alone"] == pytest.approx(
            row["ct2_int8_alone_ms"] / row["cpu_inference_int8_alone_ms"])
        assert row["vaswani_vs_ct2_fp32"] == pytest.approx(row["vaswani_tokens_per_s"] / row["ct2_fp32_tokens_per_s"])
        assert row["cpu_inference_fp32_vs_ct2_fp32_alone"] == pytest.approx(
            row["cpu_inference_fp32_tokens_per_s"] / row["ct2_fp32_alone_tokens_per_s"])
        assert row["cpu_inference_fp32_same_tokens"] is True and row["default_generate_same_tokens"] is True
        # the plain engine is transformers' loop; the defaults decode on the CPU path
        assert row["vaswani_ms"] > 0 and row["default_generate_ms"] > 0
        # beam search stops as CTranslate2's does (early_stopping=True): every engine computes the same tokens
        assert row["ct2_fp32_same_tokens"] is True
        if row["num_beams"] > 1:  # and the shipped configs' own rule (early_stopping=False), timed beside
            assert row["cpu_inference_fp32_early_stopping_false_ms"] > 0
            assert row["cpu_inference_fp32_early_stopping_false_new_tokens"] > 0
        else:
            assert "cpu_inference_fp32_early_stopping_false_ms" not in row
        assert len(row["load_average"]) == 2
        for name in ("cpu_inference_fp32", "cpu_inference_int8"):  # --profile: where one call's time goes
            shares = row[f"{name}_shares"]
            assert list(shares) == [*benchmarking.DECODER_GROUPS, "other operators", "python and dispatch"]
            assert sum(shares.values()) == pytest.approx(1) and shares["layer products"] > 0.01
            assert shares["attention"] > 0 and all(share >= 0 for group, share in shares.items()
                                                   if group != "python and dispatch")
    for shipped in rows[2:]:  # the pipeline a user builds from the folder, in process and alone, paired with CT2
        assert shipped["default_pipeline_same_text"] is True
        assert shipped["default_pipeline_alone_vs_ct2_fp32_alone"] == pytest.approx(
            shipped["ct2_fp32_alone_ms"] / shipped["default_pipeline_alone_ms"])
        assert len(shipped["default_pipeline_alone_pairs"]) == 1
    assert all("default_pipeline_ms" not in row for row in rows[:2])
    shipped = rows[2]
    assert "marian_ms" not in shipped and shipped["batch"] == 2
    assert shipped["new_tokens"] > 2 * 5  # real translations of two sentences, ended by the model, not forced
    with pytest.raises(SystemExit):
        benchmark.main(["--engines", "--threads", "0"])
    with pytest.raises(SystemExit):
        benchmark.main(["--engines", "--alone_pairs", "0"])


def test_generated_tokens_are_the_new_tokens_up_to_the_first_end_token():
    eos, pad = 2, 0
    output = torch.tensor([[1, 5, 6, 2, 0, 0], [1, 7, 2, 8, 2, 0], [1, 9, 9, 9, 9, 9]])
    assert benchmarking.generated_tokens(output, eos) == [[5, 6], [7], [9, 9, 9, 9, 9]]
    assert benchmarking.generated_tokens(output[:, :1], eos) == [[], [], []]
    assert pad not in sum(benchmarking.generated_tokens(output, eos), [])


def test_kernel_groups_name_forward_and_backward_kernels():
    assert benchmarking.kernel_group("aten::addmm") == benchmarking.kernel_group("aten::bmm") == "matrix products"
    for name in ("aten::_scaled_dot_product_flash_attention_for_cpu",
                 "aten::_scaled_dot_product_flash_attention_for_cpu_backward",
                 "aten::_scaled_dot_product_efficient_attention_backward", "aten::_flash_attention_forward"):
        assert benchmarking.kernel_group(name) == "attention kernels", name
    # composites whose time is their children's, and everything else
    for name in ("aten::linear", "aten::matmul", "aten::softmax", "aten::copy_", "Optimizer.step#Adam.step"):
        assert benchmarking.kernel_group(name) == "other", name


def test_the_decoder_operators_are_grouped_by_what_they_compute():
    group = benchmarking._decoder_group
    assert group("aten::addmm") == group("quantized::linear_dynamic") == "layer products"
    assert group("aten::baddbmm") == group("aten::_scaled_dot_product_flash_attention_for_cpu") == "attention"
    assert group("aten::_log_softmax") == group("aten::topk") == "search"
    assert group("aten::copy_") == group("aten::_scaled") == "other operators"


def test_kernel_shares_find_the_matrix_products_of_a_training_step():
    setup = benchmarking.Setup("tiny", "fp32", 2, 8, 8, 500, "cpu")
    step = benchmarking.training_step_function(benchmarking.vaswani_model(setup), setup)
    shares = benchmarking.kernel_shares(step, setup, calls=2)
    assert shares["matrix products"] > 0 and shares["attention kernels"] > 0
    assert shares["matrix products"] + shares["attention kernels"] < 1  # of the same calls' wall time


@pytest.mark.parametrize("name", ["vaswani", "marian"])
def test_peak_memory_counts_gradients_and_optimizer_state(name):
    # measured in a fresh process: in this one, memory an earlier test freed but the allocator kept would be reused
    # by the steps and never raise the resident set's high-water mark
    setup = benchmarking.Setup("small", "fp32", 4, 8, 8, 500, "cpu")
    model = benchmarking.vaswani_model(setup) if name == "vaswani" else benchmarking.marian_model(setup)
    weights_mb = model.num_parameters() * 4 / 2**20
    assert benchmarking.peak_memory_mb(name, setup, steps=2) > 2.5 * weights_mb  # gradients + 2 Adam moments: 3x


def test_matmul_peak_times_several_products_between_two_synchronizations(monkeypatch):
    # on a GPU, a synchronization around every product timed the launch, not the GPU (an H100 read at a tenth of its
    # peak): a round is `per_round` products and two synchronizations, whatever the device
    synchronizations = []
    monkeypatch.setattr(benchmarking, "synchronize", synchronizations.append)
    products = {"count": 0}
    real_matmul = torch.Tensor.__matmul__

    def counting_matmul(a, b):
        products["count"] += 1
        return real_matmul(a, b)

    monkeypatch.setattr(torch.Tensor, "__matmul__", counting_matmul)
    setup = benchmarking.Setup("tiny", "fp32", 2, 8, 8, 500, "cpu")
    flops = benchmarking.matmul_peak(setup, torch.float32, size=64, repeats=3, per_round=4)
    rounds = 3 + 2  # two warm-up rounds
    assert products["count"] == 4 * rounds
    assert len(synchronizations) == 2 * rounds
    assert flops > 0


@pytest.mark.parametrize("target", ["/dev/null", "folder"])
def test_a_json_output_that_cannot_be_written_is_one_line_before_the_measurements(tmp_path, target):
    """`--json /dev/null` (a device) ended in a traceback of 13 lines."""
    from helpers import REPO, command_in_process

    path = "/dev/null" if target == "/dev/null" else tmp_path
    result = command_in_process(REPO / "scripts" / "tools" / "benchmark.py", ["--presets", "tiny", "--json", path])
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith(f"benchmark.py: error: --json {path} is ") and len(result.stderr.splitlines()) == 1
