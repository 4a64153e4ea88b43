"""scripts/tools/gpu_suite.py and scripts/tools/gather_gpu_wheels.py: the suite's dry run, its own code on the CPU
with tiny sizes, writes every field of the report and the markdown table, with DeepSpeed and FSDP (which
cannot engage without GPUs) as rows that say so rather than a crash; a part over its time limit leaves the others; a
stale installed package is refused; the gathered wheels cover every requirement, and this package's wheel installed
as on the lent machine is the checkout's source."""

import json
import math
import os
import subprocess
import sys
import textwrap
import zipfile
from datetime import datetime

import pytest
import torch
import transformers

from helpers import PAIRS, REPO, load_script, write_jsonl
import vaswani_tools.gpu_suite as gpu_suite_module
from vaswani_tools.gpu_suite import (
    MULTI30K_FILES,
    Finished,
    child_environment,
    error_line,
    markdown,
    refused_distributed_type,
)
from vaswani_tools.gpu_wheels import (
    CARRIED,
    DEVICE_HAS,
    build_project_wheel,
    duplicated,
    set_aside_advice,
    unmet_requirements,
)

gpu_suite = load_script("tools/gpu_suite")

TRAINING_ROW = {"preset", "model", "precision", "compiled", "cuda_graphs", "tokens_per_update", "tokens_per_s",
                "seconds_per_update", "mfu", "peak_memory_mib", "peak_reserved_mib", "graph_breaks", "profile"}
PROFILE = {"updates", "ms_per_update", "kernels_per_update", "busy", "top"}
ENGINE_ROW = {"engine", "engaged", "distributed_type", "tokens_per_s", "peak_memory_mib", "seconds", "error"}
RECIPE = {"name", "options", "tokenized_bleu", "sacrebleu", "training_seconds", "steps", "tokens_per_s"}
REPORT = {"device", "date", "torch", "packages", "dry_run", "train_py_torch_compile", "peak_flops_bf16", "loss",
          "training", "engines", "recipe", "generation", "projection", "seconds", "errors"}
GENERATION_ROW = {"engine", "precision", "num_beams", "captions", "batch_size", "seconds", "captions_per_s",
                  "tokens_per_s", "generated_tokens", "same_as_vaswani", "vaswani_speed_ratio", "error"}
LOSS = {"tokens", "vocab_size", "d_model", "full_ms", "full_peak_mib", "chunked_ms", "chunked_peak_mib"}


def finite_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@pytest.fixture(scope="module")
def multi30k(tmp_path_factory):
    """A folder shaped like Multi30k's: the ten PAIRS of helpers.py as each of the three files."""
    folder = tmp_path_factory.mktemp("multi30k")
    rows = [{"en": english, "de": german} for english, german in PAIRS]
    for name in MULTI30K_FILES:
        write_jsonl(folder / name, rows)
    return folder


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory, multi30k):
    """One dry run of the whole suite (its processes take most of a minute on two cores), read by the tests below."""
    output_dir = tmp_path_factory.mktemp("suite")
    report = gpu_suite.main(["--dry_run", "--output_dir", str(output_dir), "--multi30k_dir", str(multi30k)])
    return output_dir, report


def test_the_dry_run_writes_every_field_with_its_type(dry_run):
    output_dir, report = dry_run
    written = json.loads((output_dir / "gpu_suite.json").read_text())
    assert written == json.loads(json.dumps(report))
    assert set(written) == REPORT and written["errors"] == {}
    assert written["dry_run"] is True and written["torch"] == torch.__version__ and written["device"]
    datetime.fromisoformat(written["date"])
    assert written["packages"]["transformers"] == transformers.__version__
    # the numbers' values are the GPU run's: timings, and ratios of timings (MFU against a peak measured in the same
    # process, 1.52 once on a loaded 2-core machine), are only checked to be there, finite and of their type
    assert finite_number(written["peak_flops_bf16"])

    # the output layer's loss alone, full and chunked: milliseconds, and peak memory on a GPU only
    loss = written["loss"]
    assert set(loss) == LOSS and (loss["tokens"], loss["vocab_size"]) == (4 * 8, 500)
    assert finite_number(loss["full_ms"]) and finite_number(loss["chunked_ms"])
    assert loss["full_peak_mib"] is None and loss["chunked_peak_mib"] is None

    rows = written["training"]
    # the recipe's own model (its config's preset and overrides) in its own precision, then the presets, and last the
    # updates from CUDA graphs: the recipe's, and the first preset's compiled with its step (on a CPU stand-ins that
    # run the work as it is)
    assert [(row["preset"], row["model"], row["compiled"], row["cuda_graphs"], row["precision"]) for row in rows] == [
        ("multi30k_en_de_gpu", "vaswani", False, False, "fp32"), ("tiny", "vaswani", False, False, "bf16"),
        ("tiny", "marian", False, False, "bf16"), ("tiny", "vaswani", True, False, "bf16"),
        ("multi30k_en_de_gpu", "vaswani", False, True, "fp32"), ("tiny", "vaswani", True, True, "bf16")]
    for row in rows:
        assert set(row) == TRAINING_ROW
        assert row["tokens_per_update"] == 4 * 8
        assert finite_number(row["tokens_per_s"]) and finite_number(row["mfu"])
        assert row["seconds_per_update"] > 0
        # a GPU's allocator marks (of tensors; of what it reserved, the graphs' pool included): none on a CPU
        assert row["peak_memory_mib"] is None and row["peak_reserved_mib"] is None
        assert (row["graph_breaks"] is not None) == row["compiled"]
        # where an update's time goes, from the profiler: on a CPU the operators, and no GPU busy share (a GPU's
        # share of the update's time it is busy, and the kernels it launches an update, are the same fields)
        profile = row["profile"]
        assert set(profile) == PROFILE and profile["updates"] == 1 and profile["busy"] is None
        assert finite_number(profile["ms_per_update"]) and profile["kernels_per_update"] > 100
        assert 0 < len(profile["top"]) <= 6 and all(kernel["name"].startswith("aten::") for kernel in profile["top"])
        assert all(finite_number(kernel["ms_per_update"]) for kernel in profile["top"])
    recipe_model, tiny = rows[0]["profile"], rows[1]["profile"]
    assert recipe_model["kernels_per_update"] > tiny["kernels_per_update"]  # 4 + 4 layers against 2 + 2

    assert [row["engine"] for row in written["engines"]] == ["ddp", "deepspeed", "fsdp"]
    assert all(set(row) == ENGINE_ROW for row in written["engines"])

    recipe = written["recipe"]
    assert set(recipe) == RECIPE and recipe["name"] == "multi30k_en_de_gpu" and recipe["steps"] == 2
    assert recipe["options"] == list(gpu_suite_module.SIZES["dry_run"].recipe_options)  # what train.py was given
    # train.py's own training time (updates only), and the scores of evaluate_model.py's results file
    summary = json.loads((output_dir / "recipe_training_summary.json").read_text())
    assert recipe["training_seconds"] == summary["train_seconds"] > 0
    results = json.loads((output_dir / "recipe_evaluation_results.json").read_text())
    scores = {metric["type"]: metric["value"] for metric in results["metrics"]}
    assert (recipe["tokenized_bleu"], recipe["sacrebleu"]) == (scores["tokenized_bleu"], scores["sacrebleu"])
    assert results["dataset"]["split"] == "test_2016_flickr" and results["dataset"]["num_examples"] == len(PAIRS)
    # the parts in their order (a cut run keeps the first); no projection of the paper's runs from the tiny preset
    assert list(written["seconds"]) == ["training", "recipe", "generation", "engines"]
    assert written["projection"] == []
    # what a lent machine sends back: at most 8 files, none in a subfolder; models and checkpoints stay in --work_dir
    assert sorted(path.name for path in output_dir.iterdir()) == [
        "gpu_suite.json", "gpu_suite.log", "gpu_suite.md", "recipe_evaluation_results.json",
        "recipe_training_summary.json"]


def test_engines_are_engaged_only_where_the_run_itself_says_so(dry_run):
    _, report = dry_run
    ddp, deepspeed, fsdp = report["engines"]
    # DDP on a CPU process: the run's summary.json says MULTI_CPU, and its speed comes from its metrics
    assert ddp["engaged"] is True and ddp["distributed_type"] == "MULTI_CPU" and ddp["error"] is None
    assert ddp["tokens_per_s"] > 0
    # FSDP without GPUs: train.py refuses it, and the row says what Accelerate set up instead
    assert fsdp["engaged"] is False and fsdp["distributed_type"] == "MULTI_CPU" and fsdp["tokens_per_s"] is None
    assert "train.py: error: The Accelerate config asks for FSDP" in fsdp["error"]
    # DeepSpeed: refused the same way where it is installed, or not started where it is not
    assert deepspeed["engaged"] is False and deepspeed["tokens_per_s"] is None
    assert ("asks for DEEPSPEED" in deepspeed["error"]) or ("DeepSpeed is not installed" in deepspeed["error"])


def test_the_generation_rows_decode_the_shipped_model_as_its_generate_does(dry_run):
    """Ours greedy and beam 4 on six captions (the ten validation pairs' first six), in batches of 4, as many new
    tokens as the model's own `generate` gives them here; then with a static cache and the compiled forward (dynamo's
    eager backend on a CPU), every caption decoded to the same tokens."""
    from transformers import AutoTokenizer

    from vaswani import VaswaniForConditionalGeneration
    from vaswani_tools.gpu_generation import MODEL, decoding_settings

    _, report = dry_run
    rows = report["generation"]
    assert [(row["engine"], row["num_beams"]) for row in rows] == [
        ("vaswani", 1), ("vaswani", 4), ("ctranslate2", 1), ("ctranslate2", 4), ("vaswani_compiled", 1),
        ("vaswani_compiled", 4)]
    assert all(set(row) == GENERATION_ROW and (row["captions"], row["batch_size"]) == (6, 4) for row in rows)
    model = VaswaniForConditionalGeneration.from_pretrained(REPO / MODEL).eval()
    tokenizer = AutoTokenizer.from_pretrained(REPO / MODEL)
    inputs = tokenizer([english for english, _ in PAIRS[:6]], return_tensors="pt", padding=True)
    eos = model.generation_config.eos_token_id
    for row in rows[:2]:
        assert row["error"] is None and row["precision"] == "fp32" and finite_number(row["tokens_per_s"])
        settings = decoding_settings(model.generation_config, row["num_beams"], max_new_tokens=8)
        with torch.no_grad():
            output = model.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                    **settings)
        expected = sum(ids.index(eos) if eos in ids else len(ids) for ids in output[:, 1:].tolist())
        assert row["generated_tokens"] == expected > 0
    for row in rows[4:]:
        assert row["error"] is None and row["precision"] == "fp32" and row["same_as_vaswani"] == 6
        assert finite_number(row["vaswani_speed_ratio"])


def test_the_ctranslate2_rows_count_the_captions_decoded_to_our_tokens(dry_run):
    """CTranslate2 in float32 on the CPU gives generate's tokens (greedy, and beam search stopping as its own does):
    every caption counted; its time over ours is a ratio of two timings, only checked to be there."""
    pytest.importorskip("ctranslate2", reason="the ctranslate2 extra is not installed")
    _, report = dry_run
    for row in report["generation"][2:4]:
        assert row["error"] is None and row["precision"] == "float32"
        assert row["same_as_vaswani"] == 6 and finite_number(row["vaswani_speed_ratio"])
    table = markdown(report)
    assert "| ctranslate2 | float32 | 4 | 6 |" in table and "| 6 of 6 |" in table


def test_the_captions_are_the_validation_file_read_again_from_its_start(tmp_path):
    from vaswani_tools.gpu_generation import captions

    write_jsonl(tmp_path / "validation.jsonl", [{"en": f"caption {index}", "de": "x"} for index in range(3)])
    assert captions(tmp_path / "validation.jsonl", 7) == [f"caption {index % 3}" for index in range(7)]
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(ValueError, match="holds no captions"):
        captions(tmp_path / "empty.jsonl", 2)


def test_the_paper_runs_are_projected_from_each_presets_fastest_row_of_ours():
    def row(preset, model, seconds, compiled=False):
        return {"preset": preset, "model": model, "seconds_per_update": seconds, "compiled": compiled,
                "cuda_graphs": False, "tokens_per_update": 25088, "tokens_per_s": 50176 / seconds}

    rows = [row("base", "vaswani", 0.5), row("base", "vaswani", 0.25, compiled=True), row("base", "marian", 0.1),
            row("big", "vaswani", 0.9), row("tiny", "vaswani", 0.01)]
    projected = gpu_suite_module.projection(rows)
    assert [(row["preset"], row["updates"], row["update"]) for row in projected] == [
        ("base", 100_000, "yes"), ("big", 300_000, "no")]
    assert projected[0]["hours_1_gpu"] == pytest.approx(100_000 * 0.25 / 3600)
    assert projected[1]["hours_8_gpus"] == pytest.approx(300_000 * 0.9 / 3600 / 8)
    report = gpu_suite_module._new_report(dry_run=False, train_py_compile=False)
    table = markdown({**report, "projection": projected})
    assert "| base | 100,000 | yes | 200,704 | 6.9 | 0.9 |" in table


def test_a_part_is_not_started_with_too_little_of_the_suites_time_left(tmp_path, monkeypatch, multi30k):
    sizes = gpu_suite_module.SIZES["dry_run"]
    monkeypatch.setitem(gpu_suite_module.SIZES, "dry_run", gpu_suite_module.replace(sizes, total_seconds=5))
    report = gpu_suite.main(["--dry_run", "--output_dir", str(tmp_path), "--multi30k_dir", str(multi30k)])
    assert list(report["errors"]) == ["training", "recipe", "generation", "engines"]
    assert report["errors"]["engines"].startswith("not run: ") and "(it runs alone with --only engines)" in (
        report["errors"]["engines"])
    assert report["training"] == [] and report["recipe"] is None and report["generation"] == []


def test_an_engine_run_stopped_after_its_summary_still_says_what_engaged(tmp_path):
    # on a lent H100 a DDP run trained, evaluated and saved, and its process was still ending when its time ran out
    (tmp_path / "summary.json").write_text(json.dumps({"distributed_type": "DEEPSPEED", "tokens_per_second": 9.0,
                                                       "peak_memory_mib": 3.0}))
    row = gpu_suite_module._engine_row("deepspeed", Finished(None, "Training finished", 45.0), 45.0, tmp_path)
    assert row["engaged"] is True and row["distributed_type"] == "DEEPSPEED" and row["tokens_per_s"] == 9.0
    assert row["error"] == "stopped at its time limit (45 s)"
    (tmp_path / "summary.json").unlink()  # stopped before the end of its training: nothing engaged that it said
    row = gpu_suite_module._engine_row("deepspeed", Finished(None, "training:  38%", 45.0), 45.0, tmp_path)
    assert row["engaged"] is False and row["distributed_type"] == "none"


def test_the_markdown_table_has_a_line_per_row(dry_run):
    output_dir, report = dry_run
    table = (output_dir / "gpu_suite.md").read_text()
    assert table == markdown(report)
    for header in ("| preset | model | precision | compiled | target tokens / update | tokens/s (source + target) | "
                   "MFU | peak memory (MiB) | peak reserved, graphs' pool included (MiB) |",
                   "| output layer's loss alone, bf16 | tokens | vocabulary | ms (forward + backward) | peak memory "
                   "beyond the inputs (MiB) |",
                   "| engine | engaged | distributed_type | tokens/s (source + target) | peak memory (MiB) |",
                   "| recipe | BLEU (tokenized, lowercased) | sacreBLEU | training seconds |"):
        assert header in table
    assert "| tiny | vaswani | bf16 | no | 32 |" in table and "| tiny | vaswani | bf16 | yes | 32 |" in table
    assert "| tiny | marian | bf16 | no | 32 |" in table
    assert "| multi30k_en_de_gpu | vaswani | fp32 | no | 32 |" in table
    assert "| multi30k_en_de_gpu | vaswani | fp32 | CUDA graphs | 32 |" in table
    assert "| tiny | vaswani | bf16 | yes + CUDA graphs | 32 |" in table
    assert "| full logits (the model's) | 32 | 500 |" in table and "| chunked (--chunked_loss) | 32 | 500 |" in table
    assert "| preset | model | compiled | ms / update | kernels / update | GPU busy | most GPU time |" in table
    assert table.count("aten::") >= 3 * len(report["training"])  # three operators named on each profile's line
    assert "| ddp | yes | MULTI_CPU |" in table and "| fsdp | no | MULTI_CPU | — | — |" in table
    assert f"| multi30k_en_de_gpu | {report['recipe']['tokenized_bleu']:.2f} |" in table
    assert "- engines: fsdp: exit status 1: train.py: error: The Accelerate config asks for FSDP" in table


def test_a_part_over_its_time_limit_is_an_error_and_the_other_parts_stay(dry_run, multi30k, tmp_path):
    output_dir, report = dry_run
    for name in ("gpu_suite.json", "gpu_suite.log"):
        (tmp_path / name).write_bytes((output_dir / name).read_bytes())
    again = gpu_suite.main(["--dry_run", "--only", "training", "--seconds", "1", "--output_dir", str(tmp_path),
                            "--multi30k_dir", str(multi30k)])
    assert again["errors"] == {"training": "stopped at its time limit (1 s)"}
    assert again["training"] == []  # the worker was stopped before its first row
    assert again["engines"] == report["engines"] and again["recipe"] == report["recipe"]  # kept from the earlier run
    assert json.loads((tmp_path / "gpu_suite.json").read_text())["errors"] == again["errors"]
    assert "- training: stopped at its time limit (1 s)" in (tmp_path / "gpu_suite.md").read_text()


def test_the_recipe_part_trains_the_config_on_a_gpu_and_the_same_run_shortened_in_the_dry_run():
    """The GPU recipe's candidate (the CPU recipe's 9,000 updates of 4,096 tokens, from CUDA graphs) is the config
    itself, which the suite trains as it is on a GPU; the dry run (the test above) trains the same config, 2 updates
    eagerly on the CPU."""
    from vaswani.training.arguments import parse_arguments

    config = str(REPO / gpu_suite_module.RECIPE_CONFIG)
    _, model, gpu = parse_arguments(["--config", config, *gpu_suite_module.SIZES["gpu"].recipe_options])
    assert (gpu.max_steps, gpu.max_tokens_per_batch, gpu.tokens_per_update) == (9000, 4096, 4096)
    assert (gpu.learning_rate, gpu.warmup_steps, gpu.cooldown_steps) == (0.005, 2000, 2700)
    assert gpu.cuda_graphs and not gpu.torch_compile and gpu.mixed_precision == "no"
    _, dry_model, dry = parse_arguments(["--config", config, *gpu_suite_module.SIZES["dry_run"].recipe_options])
    assert dry_model == model and not dry.cuda_graphs and dry.max_steps == 2
    assert (dry.learning_rate, dry.mixed_precision) == (gpu.learning_rate, gpu.mixed_precision)
    # the training part's row of the recipe's model: its update's size
    pairs, length = gpu_suite_module.SIZES["gpu"].recipe_batch
    assert pairs * length <= gpu.max_tokens_per_batch < (pairs + 1) * length


def test_a_time_limit_of_its_own_goes_with_one_part(tmp_path):
    with pytest.raises(ValueError, match="--seconds 100: a part's time limit goes with --only PART"):
        gpu_suite.main(["--dry_run", "--seconds", "100", "--output_dir", str(tmp_path)])


def test_a_failure_is_told_by_its_own_error_line():
    output = "noise\ntrain.py: error: --max_steps must be positive\nTraceback:\n  File x\nChildFailedError:\n===\n"
    assert error_line(output) == "train.py: error: --max_steps must be positive"
    assert error_line("Traceback:\n  File x\nImportError: DeepSpeed is not installed\n") == (
        "ImportError: DeepSpeed is not installed")
    assert error_line("one\rtwo\n\n") == "two" and error_line("") == "no output"
    assert refused_distributed_type("x: but Accelerate set up NO on cpu: ...") == "NO"
    assert refused_distributed_type("ImportError: DeepSpeed is not installed") == "none"


# --- the wheels the lent machine gets -------------------------------------------------------------------------------


def test_every_requirement_of_this_package_is_carried_or_on_the_lent_machine():
    import tomllib

    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name

    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    carried = {canonicalize_name(name) for name in CARRIED}
    missing = [text for text in project["dependencies"]
               if canonicalize_name(Requirement(text).name) not in carried | DEVICE_HAS]
    assert not missing, f"add them to gather_gpu_wheels.CARRIED: {missing}"


def fake_wheel(folder, name: str, *requires: str):
    wheel = folder / f"{name}-1.0-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        metadata = [f"Name: {name}", "Version: 1.0", *(f"Requires-Dist: {text}" for text in requires)]
        archive.writestr(f"{name}-1.0.dist-info/METADATA", "\n".join(metadata) + "\n")
    return wheel


def test_the_gathered_wheels_are_checked_for_what_the_machine_lacks(tmp_path):
    first = tmp_path / "one"
    first.mkdir()
    wheels = [
        fake_wheel(tmp_path, "alpha", "beta>=1", "torch>=2", "left-pad", "old-thing; python_version < '3.8'",
                   "extra-thing; extra == 'docs'"),
        fake_wheel(tmp_path, "beta"),
    ]
    # beta is carried, torch is on the machine, the marker and the extra leave two out: left-pad is missing
    assert unmet_requirements(wheels) == ["alpha needs left-pad"]
    assert duplicated(wheels) == []
    assert duplicated(wheels + [fake_wheel(first, "Beta")]) == ["beta"]


def test_this_packages_wheel_installed_as_on_the_lent_machine_is_the_checkouts_source(tmp_path):
    """Built and installed offline, --no-deps into a folder on PYTHONPATH as the device command does; gpu_suite.py
    accepts it, and refuses it once a module differs from the checkout (a wheel gathered before the last change)."""
    wheel = build_project_wheel(tmp_path / "wheels", REPO)
    site = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(site), str(wheel)], check=True)
    code = textwrap.dedent(f"""
        from pathlib import Path
        import vaswani
        from vaswani_tools.gpu_suite import check_installed_package
        print(vaswani.__file__)
        check_installed_package(Path({str(REPO)!r}))
        with open({str(site / "vaswani/training/loop.py")!r}, "a") as module:
            module.write("# changed after the wheel was built")
        try:
            check_installed_package(Path({str(REPO)!r}))
        except ValueError as error:
            print(error)
    """)
    tools = REPO / "scripts" / "tools"  # vaswani_tools, which the wheel does not hold
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=240,
                          env={**child_environment(), "PYTHONPATH": os.pathsep.join([str(site), str(tools)])})
    installed_at, refusal = done.stdout.strip().splitlines()[-2:]
    assert installed_at == str(site / "vaswani" / "__init__.py")
    assert "is not this checkout's source: training/loop.py differ" in refusal


def test_a_call_over_the_limit_is_told_to_leave_the_shipped_weights_behind_but_the_decoded_model():
    advice = set_aside_advice(REPO)
    shipped = sorted(REPO.glob("results/*/model/model.safetensors"))
    assert len(shipped) == 5 and "(4 files," in advice and "git checkout -- results" in advice
    removed = advice.split("`rm ")[1].split("`")[0].split()
    assert "results/multi30k_en_de/model/model.safetensors" not in removed  # the generation part decodes with it
    assert sorted(removed) == sorted(str(path.relative_to(REPO)) for path in shipped
                                     if path.parent.parent.name != "multi30k_en_de")


def test_gathering_writes_its_wheel_folder_whole_and_replaces_only_its_own(tmp_path, monkeypatch):
    """--wheel_dir is every command's output: a folder of the user's is never emptied (it used to lose its wheels),
    an earlier gathering is replaced only with --overwrite_output_dir, and a gathering that fails leaves it whole."""
    import argparse

    from vaswani_tools import gpu_wheels

    def download(versions, wheel_dir, python_version):
        (wheel_dir / "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl").write_bytes(b"wheel")

    def build(wheel_dir, repo):
        wheel = wheel_dir / "vaswani_transformer-0.1.0-py3-none-any.whl"
        wheel.write_bytes(b"ours")
        return wheel

    monkeypatch.setattr(gpu_wheels, "_carried_versions", lambda: {})
    monkeypatch.setattr(gpu_wheels, "_download_wheels", download)
    monkeypatch.setattr(gpu_wheels, "build_project_wheel", build)
    monkeypatch.setattr(gpu_wheels, "unmet_requirements", lambda wheels, python_version: [])
    monkeypatch.setattr(gpu_wheels, "duplicated", lambda wheels: [])  # (they read the wheels' metadata: tested above)
    wheel_dir, repo = tmp_path / "wheels", tmp_path / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)  # (the size of what travels counts its files)

    def gather(overwrite=False):
        arguments = argparse.Namespace(wheel_dir=str(wheel_dir), multi30k_dir=str(tmp_path / "none"), no_data=True,
                                       python_version="3.12", overwrite_output_dir=overwrite)
        gpu_wheels.gather(arguments, repo)

    wheel_dir.mkdir()
    (wheel_dir / "mine-1.0-py3-none-any.whl").write_bytes(b"the user's")
    (wheel_dir / "notes.txt").write_text("the user's")
    with pytest.raises(FileExistsError, match="exists and is not empty"):
        gather()
    with pytest.raises(FileExistsError, match="holds mine-1.0-py3-none-any.whl \\(a file\\), which is not a file this "
                                              "project writes"):  # named as a wheel, but no gathering's
        gather(overwrite=True)
    assert sorted(path.name for path in wheel_dir.iterdir()) == ["mine-1.0-py3-none-any.whl", "notes.txt"]
    (wheel_dir / "notes.txt").unlink()
    (wheel_dir / "mine-1.0-py3-none-any.whl").unlink()
    gather()
    assert sorted(path.name for path in wheel_dir.iterdir()) == [  # and the record of what the gathering wrote
        ".vaswani-manifest.json", "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "vaswani_transformer-0.1.0-py3-none-any.whl"]
    with pytest.raises(FileExistsError, match="--overwrite_output_dir"):
        gather()
    monkeypatch.setattr(gpu_wheels, "unmet_requirements", lambda wheels, python_version: ["sympy is missing"])
    with pytest.raises(ValueError, match="sympy is missing"):
        gather(overwrite=True)
    assert sorted(path.name for path in wheel_dir.iterdir()) == [  # and the record of what the gathering wrote
        ".vaswani-manifest.json", "torch-2.11.0-cp312-cp312-manylinux_2_28_x86_64.whl",
        "vaswani_transformer-0.1.0-py3-none-any.whl"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["repo", "wheels"]  # no temporary folder left
