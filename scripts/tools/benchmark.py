"""Speed of this project's model against transformers' Marian built with the identical architecture.

    python scripts/tools/benchmark.py                       # tiny, small, base; fp32 and bf16; training and generation
    python scripts/tools/benchmark.py --presets base --json results.json

What is measured, in one process, the two models alternately (round after round, so that a change in the machine's
load hits both alike), on the same random batch:
  * training: one optimizer step (forward with labels, backward, Adam step) -> target tokens/s, source+target
    tokens/s, model FLOPs utilization (analytic FLOPs / time / the matmul peak measured in the same run), and peak
    memory (measured in a fresh subprocess per model, since a process' high-water mark never goes down on CPU);
  * generation: greedy and beam-4 decoding of a batch of inputs, forced to the same number of new tokens for both
    models -> generated tokens/s;
  * with --profile, where each model's time goes: the share of a step's (a generate call's) time spent in matrix
    products and in attention kernels (torch.profiler, self time of each operator), the rest being other operators
    and Python. Both models call the same matrix products and attention kernels, so Marian's share in them bounds the
    ratio: however cheap everything else became, this model could be at most 1 / that share times faster than
    Marian ("speedup_ceiling").
Runs on CPU by default and on the GPU when one is present (bf16 there, with a larger batch).

    python scripts/tools/benchmark.py --engines --threads 1 2    # generation in every engine (needs the ctranslate2 extra)

With --engines, only generation is timed, on the CPU, fp32 weights unless named: this model's `generate` as it is
(`vaswani`), after `vaswani.serving.cpu_inference.for_cpu_inference` (`vaswani_cpu`: the package's own decoding loop,
its Linear layers through oneDNN) or with int8 Linear layers (`vaswani_int8`); Marian (presets only); and CTranslate2
running this model's export (`ct2_fp32`, `ct2_int8`, `vaswani.serving.ctranslate2_export`), in process and alone in a
fresh process (`*_alone`). All in one process, alternating round after round, at each thread count, greedy and beam-4,
on each of `--workloads`: a preset with random weights (every engine forced to `--new-tokens` new tokens), or a shipped
model, results/NAME/model, on the first `--batch-size` (default 64) inputs of its held-out data in one padded batch,
decoded up to its generation config's max_new_tokens with its length penalty (and n-gram rule). Each row gives the
milliseconds per batch, the generated tokens per second (the tokens the plain model generates), the ratios to
CTranslate2 fp32, whether `vaswani_cpu` gave `generate`'s tokens, and the load average before and after (a loaded
machine's numbers are noise). The table of results/benchmark/README.md comes from:

    python scripts/tools/benchmark.py --engines --threads 1 2 --rounds 7 \\
        --workloads base multi30k_en_de multi30k_de_en samsum --json results/benchmark/engines.json
"""

import argparse
import copy
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch

from vaswani import VaswaniTokenizer
from vaswani.output_paths import write_text_atomically
from vaswani.serving.benchmarking import (
    Setup,
    autocast,
    cpu_name,
    make_batch,
    marian_model,
    matmul_peak,
    proc_field,
    synchronize,
    training_flops,
    vaswani_model,
)
from vaswani.serving.cpu_inference import for_cpu_inference


# --- training ------------------------------------------------------------------------------------------------------


def training_step_function(model, setup: Setup):
    model.to(setup.device).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, fused=True)
    batch = make_batch(setup)

    def step():
        with autocast(setup):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def time_steps(step, steps: int, setup: Setup) -> float:
    synchronize(setup)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(setup)
    return (time.perf_counter() - start) / steps


def alternate(functions: dict, rounds: int, steps: int, warmup: int, setup: Setup) -> dict[str, float]:
    """Median seconds per call of each function, measured in alternating rounds."""
    for function in functions.values():
        for _ in range(warmup):
            function()
    seconds = {name: [] for name in functions}
    for _ in range(rounds):
        for name, function in functions.items():
            seconds[name].append(time_steps(function, steps, setup))
    return {name: statistics.median(values) for name, values in seconds.items()}


def peak_memory_mb(model_name: str, setup: Setup, steps: int = 3) -> float:
    """Peak memory of training steps above the model at rest (activations, gradients, optimizer state), in MiB,
    measured in a fresh process."""
    code = (
        "import json, sys; sys.argv=['x']; import benchmark as b; "
        f"print(json.dumps(b._measure_memory({model_name!r}, b.Setup(**{asdict(setup)!r}), {steps})))"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=__file__.rsplit("/", 1)[0], check=True
    )
    return json.loads(result.stdout.strip().splitlines()[-1])


def _resident_mb(field: str) -> float:
    """VmRSS (resident now) or VmHWM (its high-water mark) of this process, from /proc/self/status, in MiB."""
    value = proc_field("/proc/self/status", field)
    if value is None:
        raise RuntimeError(f"/proc/self/status has no {field} line")
    return int(value.split()[0]) / 1024  # the kernel reports kB


def _measure_memory(model_name: str, setup: Setup, steps: int) -> float:
    """Memory the training steps need above the model at rest: on GPU the allocator's peak; on CPU the resident
    set's high-water mark during the steps minus the resident set before them. Writing 5 to /proc/self/clear_refs
    resets the high-water mark (Linux 4.0+), so what model construction or the imports touched does not count.
    Call it in a fresh process (peak_memory_mb does): in a long-lived one, memory that earlier work freed but the
    allocator kept is reused by the steps and never raises the resident set, and the measurement reads near 0."""
    torch.manual_seed(0)
    model = vaswani_model(setup) if model_name == "vaswani" else marian_model(setup)
    step = training_step_function(model, setup)
    if setup.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
        before = torch.cuda.memory_allocated()
        for _ in range(steps):
            step()
        return (torch.cuda.max_memory_allocated() - before) / 2**20
    try:
        with open("/proc/self/clear_refs", "w") as clear_refs:
            clear_refs.write("5")
    except OSError:  # not allowed in some sandboxes: the mark then includes construction, still a fresh process's
        pass
    before = _resident_mb("VmRSS")
    for _ in range(steps):
        step()
    return _resident_mb("VmHWM") - before


# --- generation ----------------------------------------------------------------------------------------------------


def generation_function(model, setup: Setup, new_tokens: int, num_beams: int):
    model.to(setup.device).eval()
    batch = make_batch(setup, seed=1)
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

    @torch.no_grad()
    def generate():
        with autocast(setup):
            out = model.generate(
                **inputs, max_new_tokens=new_tokens, min_new_tokens=new_tokens, num_beams=num_beams, do_sample=False
            )
        assert out.shape[1] == new_tokens + 1, out.shape
        return out

    return generate


# --- inference engines ---------------------------------------------------------------------------------------------

ENGINES = ("vaswani", "vaswani_cpu", "vaswani_int8", "marian", "ct2_fp32", "ct2_int8")
REPO = Path(__file__).resolve().parents[2]
# the shipped models timed as they are used: a batch of the first held-out inputs, decoded as their generation
# config says (beam count aside), up to its max_new_tokens; each is (data file under --data_dir, text column)
SHIPPED_WORKLOADS = {
    "multi30k_en_de": ("multi30k/test_2016_flickr.jsonl", "en"),
    "multi30k_de_en": ("multi30k/test_2016_flickr.jsonl", "de"),
    "samsum": ("samsum/validation.jsonl", "document"),
}
WORKLOADS = ("tiny", "small", "base", "big", *SHIPPED_WORKLOADS)


@dataclass
class Workload:
    """What every engine decodes in one row of the table: the models, the batch (token ids for PyTorch, token strings
    for CTranslate2) and the decoding settings of each beam count."""

    name: str
    setup: Setup
    models: dict  # engine name -> PyTorch model
    exports: dict  # engine name -> CTranslate2 folder
    inputs: dict  # input_ids, attention_mask
    sources: list  # the same inputs as CTranslate2's token strings
    settings: dict  # `generate` keyword arguments besides num_beams
    forced_length: bool  # every engine forced to the same number of new tokens (random weights)


def ctranslate2_export(model, folder: Path, quantization: str | None) -> Path:
    """`model` exported to CTranslate2 in `folder` (saved first with a small tokenizer: the ids it lacks get
    placeholder names in the exported vocabulary, which is all the benchmark's random inputs need)."""
    from vaswani.serving.ctranslate2_export import export_to_ctranslate2

    checkpoint = folder / "checkpoint"
    if not checkpoint.is_dir():
        model.save_pretrained(checkpoint)
        VaswaniTokenizer.train_from_texts(["a b c"], vocab_size=300, min_frequency=1).save_pretrained(checkpoint)
    return export_to_ctranslate2(checkpoint, folder / f"ct2_{quantization or 'fp32'}", quantization=quantization)


def preset_workload(preset: str, args, scratch: Path) -> Workload:
    """A preset with random weights on a random batch, every engine forced to `--new-tokens` new tokens."""
    setup = Setup(preset, "fp32", args.batch_size or 32, args.source_length, args.target_length, args.vocab_size, "cpu")
    torch.manual_seed(0)
    ours = vaswani_model(setup).eval()
    models = {
        "vaswani": ours,
        "vaswani_cpu": for_cpu_inference(copy.deepcopy(ours)),
        "vaswani_int8": for_cpu_inference(ours, quantization="int8"),
        "marian": marian_model(setup),
    }
    exports = {f"ct2_{q or 'fp32'}": ctranslate2_export(ours, scratch / preset, q) for q in (None, "int8")}
    batch = make_batch(setup, seed=1)
    vocabulary = json.loads((exports["ct2_fp32"] / "shared_vocabulary.json").read_text(encoding="utf-8"))
    sources = [[vocabulary[index] for index in row] for row in batch["input_ids"].tolist()]
    settings = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens}
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    return Workload(preset, setup, models, exports, inputs, sources, settings, forced_length=True)


def shipped_workload(name: str, args, scratch: Path) -> Workload:
    """A shipped model (results/NAME/model) on the first `--batch-size` (default 64) inputs of its held-out data, in
    one padded batch, decoded with its generation config's length limit, length penalty and n-gram rule."""
    from transformers import AutoTokenizer, GenerationConfig

    from vaswani import VaswaniForConditionalGeneration
    from vaswani.serving.ctranslate2_export import export_to_ctranslate2

    folder = REPO / "results" / name / "model"
    data_file, column = SHIPPED_WORKLOADS[name]
    data_file = Path(args.data_dir) / data_file
    if not data_file.is_file():
        raise FileNotFoundError(f"--workloads {name} reads {data_file}: give --data_dir, the folder of the datasets.")
    with data_file.open(encoding="utf-8") as lines:
        texts = [json.loads(line)[column] for _, line in zip(range(args.batch_size or 64), lines)]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    ours = VaswaniForConditionalGeneration.from_pretrained(folder).eval()
    models = {
        "vaswani": ours,
        "vaswani_cpu": for_cpu_inference(copy.deepcopy(ours)),
        "vaswani_int8": for_cpu_inference(ours, quantization="int8"),
    }
    exports = {f"ct2_{q or 'fp32'}": export_to_ctranslate2(folder, scratch / name / f"ct2_{q or 'fp32'}", quantization=q)
               for q in (None, "int8")}
    inputs = tokenizer(texts, return_tensors="pt", padding=True, truncation=True)
    inputs = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts, truncation=True)["input_ids"]]
    generation = GenerationConfig.from_pretrained(folder)
    settings = {"max_new_tokens": generation.max_new_tokens, "length_penalty": generation.length_penalty}
    if generation.no_repeat_ngram_size:
        settings["no_repeat_ngram_size"] = generation.no_repeat_ngram_size
    setup = Setup(name, "fp32", len(texts), inputs["input_ids"].shape[1], 0, ours.config.vocab_size, "cpu")
    return Workload(name, setup, models, exports, inputs, sources, settings, forced_length=False)


def generate_function(model, workload: Workload, num_beams: int):
    """One `generate` call of `model` on the workload's batch (returns the output ids)."""

    settings = decoding_settings(workload, num_beams)

    @torch.no_grad()
    def generate():
        out = model.generate(**workload.inputs, do_sample=False, **settings)
        if workload.forced_length:
            assert out.shape[1] == workload.settings["max_new_tokens"] + 1, out.shape
        return out

    return generate


def decoding_settings(workload: Workload, num_beams: int) -> dict:
    """The workload's `generate` settings with `num_beams` (a length penalty only for beam search)."""
    settings = {**workload.settings, "num_beams": num_beams}
    if num_beams == 1:
        settings.pop("length_penalty", None)
    return settings


def ctranslate2_options(workload: Workload, num_beams: int) -> dict:
    from transformers import GenerationConfig

    from vaswani.serving.ctranslate2_export import translate_options

    return translate_options(GenerationConfig(**decoding_settings(workload, num_beams)))


def ctranslate2_function(folder: Path, sources: list, options: dict, threads: int):
    import ctranslate2

    translator = ctranslate2.Translator(str(folder), device="cpu", inter_threads=1, intra_threads=threads)

    def generate():
        return translator.translate_batch(sources, max_batch_size=len(sources), **options)

    return generate


def ctranslate2_alone(folder: Path, sources: list, options: dict, threads: int, rounds: int, scratch: Path) -> float:
    """Median seconds of one CTranslate2 call timed in a fresh process that runs nothing else: beside PyTorch's
    thread pool, CTranslate2 lost about a quarter of its 2-thread speed on the 2-core machine of the serving table
    (results/benchmark/README.md), so its in-process figure alone would flatter this model."""
    job = scratch / "ctranslate2_job.json"
    job.write_text(json.dumps({"folder": str(folder), "sources": sources, "options": options}), encoding="utf-8")
    code = (  # ctranslate2 alone: no torch, no transformers in that process
        "import json, statistics, sys, time\n"
        "import ctranslate2\n"
        f"job = json.loads(open({str(job)!r}, encoding='utf-8').read())\n"
        f"translator = ctranslate2.Translator(job['folder'], device='cpu', inter_threads=1, intra_threads={threads})\n"
        "def call():\n"
        "    translator.translate_batch(job['sources'], max_batch_size=len(job['sources']), **job['options'])\n"
        "call()\n"
        "seconds = []\n"
        f"for _ in range({rounds}):\n"
        "    start = time.perf_counter(); call(); seconds.append(time.perf_counter() - start)\n"
        "print(json.dumps(statistics.median(seconds)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def new_tokens(output: torch.Tensor, pad_token_id: int) -> int:
    """The tokens `generate` produced (the end token counted, the padding after it and the start token not)."""
    return int((output[:, 1:] != pad_token_id).sum())


def load_average() -> float:
    """The machine's load over the last minute (os.getloadavg): beside each row, how busy the cores were."""
    return round(os.getloadavg()[0], 2)


def engine_row(workload: Workload, threads: int, beams: int, args, scratch: Path) -> dict:
    """One row of the table: every engine of the workload, alternating in this process, and CTranslate2 alone."""
    options = ctranslate2_options(workload, beams)
    calls = {name: generate_function(model, workload, beams) for name, model in workload.models.items()}
    calls.update({name: ctranslate2_function(folder, workload.sources, options, threads)
                  for name, folder in workload.exports.items()})
    load_before = load_average()
    seconds = alternate(calls, args.rounds, 1, 1, workload.setup)
    plain, ours = calls["vaswani"](), calls["vaswani_cpu"]()
    pad = workload.models["vaswani"].config.pad_token_id
    tokens = new_tokens(plain, pad)  # what the plain model generates: the work every engine does
    row = {"workload": workload.name, "threads": threads, "num_beams": beams, "batch": workload.setup.batch_size,
           "source_length": workload.setup.source_length, "new_tokens": tokens,
           "vaswani_cpu_same_tokens": plain.tolist() == ours.tolist(), "load_average": [load_before, load_average()]}
    for name, value in seconds.items():
        row[f"{name}_ms"] = 1000 * value
        row[f"{name}_tokens_per_s"] = tokens / value
    alone = {f"{name}_alone": ctranslate2_alone(folder, workload.sources, options, threads, args.rounds, scratch)
             for name, folder in workload.exports.items()}
    for name, value in alone.items():
        row[f"{name}_ms"] = 1000 * value
        row[f"{name}_tokens_per_s"] = tokens / value
    for name in ("vaswani", "vaswani_cpu", "marian"):
        if name in seconds:
            row[f"{name}_vs_ct2_fp32"] = seconds["ct2_fp32"] / seconds[name]
            row[f"{name}_vs_ct2_fp32_alone"] = alone["ct2_fp32_alone"] / seconds[name]
    row["vaswani_int8_vs_ct2_int8"] = seconds["ct2_int8"] / seconds["vaswani_int8"]
    row["vaswani_int8_vs_ct2_int8_alone"] = alone["ct2_int8_alone"] / seconds["vaswani_int8"]
    return row


def run_engines(args) -> dict:
    """Generation time of every engine on every workload, at each thread count, greedy and beam-4 (see the module
    docstring)."""
    report = {"device": cpu_name(), "torch": torch.__version__, "engines": []}
    print(f"device: {report['device']}; torch {torch.__version__}")
    with tempfile.TemporaryDirectory(prefix="vaswani-benchmark-") as scratch:
        scratch = Path(scratch)
        for name in args.workloads:
            workload = (shipped_workload if name in SHIPPED_WORKLOADS else preset_workload)(name, args, scratch)
            for threads in args.threads:
                torch.set_num_threads(threads)
                for beams in (1, 4):
                    row = engine_row(workload, threads, beams, args, scratch)
                    report["engines"].append(row)
                    names = [key[: -len("_ms")] for key in row if key.endswith("_ms")]
                    print(
                        f"generate {name} {threads} thread(s) beams={beams} (load {row['load_average']}): "
                        + " | ".join(f"{engine} {row[engine + '_ms']:.0f} ms" for engine in names)
                        + f"; vs CTranslate2 fp32 (in process / alone): vaswani x{row['vaswani_vs_ct2_fp32']:.2f} / "
                        f"x{row['vaswani_vs_ct2_fp32_alone']:.2f}, vaswani_cpu x{row['vaswani_cpu_vs_ct2_fp32']:.2f} / "
                        f"x{row['vaswani_cpu_vs_ct2_fp32_alone']:.2f} (same tokens as generate: "
                        f"{row['vaswani_cpu_same_tokens']}); int8 vs CTranslate2 int8 "
                        f"x{row['vaswani_int8_vs_ct2_int8']:.2f} / x{row['vaswani_int8_vs_ct2_int8_alone']:.2f}"
                    )
    return report


# --- where the time goes ---------------------------------------------------------------------------------------------

# Operators (forward and backward) by the kind of work they do; the name of a backward kernel contains its forward's.
MATRIX_PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::_addmm_activation")
ATTENTION_KERNELS = ("scaled_dot_product", "flash_attention", "efficient_attention", "cudnn_attention")


def kernel_group(operator: str) -> str:
    """'matrix products', 'attention kernels' or 'other' for an operator name as torch.profiler reports it."""
    if operator in MATRIX_PRODUCTS:
        return "matrix products"
    if any(part in operator for part in ATTENTION_KERNELS):
        return "attention kernels"
    return "other"


def kernel_shares(function, setup: Setup, calls: int = 1) -> dict[str, float]:
    """Share of `function`'s time spent in matrix products and in attention kernels: the self time of every operator
    (device time on a GPU), summed by group, over the wall time of the same profiled calls. Self times do not count
    nested operators twice. The profiler's own cost lands in the wall time, never in a kernel: it can only make the
    shares smaller, and the ceiling computed from them larger."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = setup.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    function()  # outside the profile: first-call work (allocations, autotuning) is not what a step costs
    with profile(activities=activities) as profiler:
        synchronize(setup)
        start = time.perf_counter()
        for _ in range(calls):
            function()
        synchronize(setup)
        wall = time.perf_counter() - start
    totals = {"matrix products": 0.0, "attention kernels": 0.0}
    for event in profiler.key_averages():
        group = kernel_group(event.key)
        if group in totals:
            totals[group] += (event.self_device_time_total if on_gpu else event.self_cpu_time_total) / 1e6
    return {group: seconds / wall for group, seconds in totals.items()}


def profile_row(row: dict, functions: dict, setup: Setup) -> None:
    """Add to a result row each model's share of its time in matrix products and attention kernels (the rest is
    every other operator and the Python around them), and the ceiling the shared kernels put on the ratio: 1 over
    Marian's share in them."""
    for name, function in functions.items():
        shares = kernel_shares(function, setup)
        for group, share in shares.items():
            row[f"{name}_share_{group.replace(' ', '_')}"] = share
        row[f"{name}_share_other"] = 1 - sum(shares.values())
    row["speedup_ceiling"] = 1 / (row["marian_share_matrix_products"] + row["marian_share_attention_kernels"])
    print(
        f"    where the time goes (this model / Marian): matrix products {row['vaswani_share_matrix_products']:.0%} / "
        f"{row['marian_share_matrix_products']:.0%}, attention kernels {row['vaswani_share_attention_kernels']:.0%} / "
        f"{row['marian_share_attention_kernels']:.0%}, the rest {row['vaswani_share_other']:.0%} / "
        f"{row['marian_share_other']:.0%} -> with the same kernels the ratio is at most x{row['speedup_ceiling']:.2f}"
    )


# --- the report ----------------------------------------------------------------------------------------------------


def run(args) -> dict:
    device = "cuda" if torch.cuda.is_available() and not args.cpu else "cpu"
    torch.set_num_threads(torch.get_num_threads())
    precisions = args.precisions or (["bf16"] if device == "cuda" else ["fp32", "bf16"])
    batch_size = args.batch_size or (128 if device == "cuda" else 32)
    device_name = torch.cuda.get_device_name() if device == "cuda" else f"{cpu_name()} ({torch.get_num_threads()} threads)"
    report = {"device": device_name, "torch": torch.__version__, "peak_flops": {}, "training": [], "generation": []}
    print(f"device: {device_name}; torch {torch.__version__}")

    probe = Setup("tiny", "fp32", batch_size, args.source_length, args.target_length, args.vocab_size, device)
    for precision, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
        if device == "cuda":  # big enough, and enough of them, that the GPU's time is what is measured
            peak = matmul_peak(probe, dtype, size=8192, per_round=10)
        else:  # 1024 in bf16: a CPU without bf16 instructions emulates it, and a bigger product takes minutes
            peak = matmul_peak(probe, dtype, size=1024 if precision == "bf16" else 2048)
        report["peak_flops"][precision] = peak
        print(f"matmul peak {precision}: {report['peak_flops'][precision] / 1e9:.1f} GFLOP/s")
    if "bf16" in precisions and report["peak_flops"]["bf16"] < report["peak_flops"]["fp32"] and not args.force_bf16:
        # CPUs without bf16 instructions (no AVX512-BF16 / AMX) emulate bf16 products, tens of times slower than fp32:
        # a bf16 row would take hours and measure the emulation, not the models.
        precisions = [p for p in precisions if p != "bf16"]
        report["skipped"] = "bf16: matrix products are slower than fp32 on this device (no native bf16); --force-bf16 runs them"
        print(f"skipping bf16: {report['skipped']}")

    for preset in args.presets:
        for precision in precisions:
            setup = Setup(preset, precision, batch_size, args.source_length, args.target_length, args.vocab_size, device)
            torch.manual_seed(0)
            ours, marian = vaswani_model(setup), marian_model(setup)
            steps = {"vaswani": training_step_function(ours, setup), "marian": training_step_function(marian, setup)}
            seconds = alternate(steps, args.rounds, args.steps, args.warmup, setup)
            flops = training_flops(ours.config, setup)
            row = {"preset": preset, "precision": precision, "batch": f"{batch_size}x{args.source_length}+{args.target_length}",
                   "parameters_m": round(ours.num_parameters() / 1e6, 1)}
            for name, value in seconds.items():
                row[f"{name}_target_tokens_per_s"] = batch_size * args.target_length / value
                row[f"{name}_tokens_per_s"] = batch_size * (args.source_length + args.target_length) / value
                row[f"{name}_mfu"] = flops / value / report["peak_flops"][precision]
                if args.memory:
                    row[f"{name}_peak_memory_mb"] = peak_memory_mb(name, setup)
            row["speedup"] = seconds["marian"] / seconds["vaswani"]
            report["training"].append(row)
            print(
                f"train {preset:5s} {precision}: vaswani {row['vaswani_target_tokens_per_s']:8.0f} tgt tok/s "
                f"(MFU {row['vaswani_mfu']:.0%}) | marian {row['marian_target_tokens_per_s']:8.0f} "
                f"(MFU {row['marian_mfu']:.0%}) | x{row['speedup']:.2f}"
            )
            if args.profile:
                profile_row(row, steps, setup)
            del ours, marian, steps

            if preset in args.generation_presets:
                torch.manual_seed(0)
                ours, marian = vaswani_model(setup), marian_model(setup)
                for beams in (1, 4):
                    calls = {
                        "vaswani": generation_function(ours, setup, args.new_tokens, beams),
                        "marian": generation_function(marian, setup, args.new_tokens, beams),
                    }
                    seconds = alternate(calls, args.rounds, 1, 1, setup)
                    row = {"preset": preset, "precision": precision, "num_beams": beams, "batch": batch_size,
                           "new_tokens": args.new_tokens}
                    for name, value in seconds.items():
                        row[f"{name}_tokens_per_s"] = batch_size * args.new_tokens / value
                    row["speedup"] = seconds["marian"] / seconds["vaswani"]
                    report["generation"].append(row)
                    print(
                        f"generate {preset:5s} {precision} beams={beams}: vaswani {row['vaswani_tokens_per_s']:7.0f} "
                        f"tok/s | marian {row['marian_tokens_per_s']:7.0f} | x{row['speedup']:.2f}"
                    )
                    if args.profile:
                        profile_row(row, calls, setup)
                del ours, marian
    return report


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--presets", nargs="+", default=["tiny", "small", "base"], choices=["tiny", "small", "base", "big"])
    parser.add_argument("--generation-presets", nargs="+", default=["base"], help="presets whose generation is timed")
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], help="default: fp32 and bf16 on CPU, bf16 on GPU")
    parser.add_argument("--batch-size", type=int, help="default: 32 on CPU, 128 on GPU")
    parser.add_argument("--source-length", type=int, default=32)
    parser.add_argument("--target-length", type=int, default=32)
    parser.add_argument("--vocab-size", type=int, default=10000)
    parser.add_argument("--new-tokens", type=int, default=32, help="tokens generated per input")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=3, help="training steps per round")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory subprocesses")
    parser.add_argument("--cpu", action="store_true", help="run on the CPU even when a GPU is present")
    parser.add_argument("--force-bf16", action="store_true", help="time bf16 even where its matmuls are slower than fp32")
    parser.add_argument(
        "--profile", action="store_true",
        help="also profile one step (one generate call) of each model: the share of matrix products, attention "
        "kernels and the rest, and the ceiling on the ratio that the shared kernels allow",
    )
    parser.add_argument("--engines", action="store_true",
                        help="time generation in every engine instead (CPU; needs the ctranslate2 extra)")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2], help="with --engines: the thread counts")
    parser.add_argument(
        "--workloads", nargs="+", default=["base"], choices=WORKLOADS,
        help="with --engines: presets (random weights and inputs) and shipped models (results/NAME/model on its "
        "held-out data)",
    )
    parser.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data"),
                        help="with --engines: the datasets folder the shipped workloads read")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.engines and any(count < 1 for count in args.threads):
        parser.error(f"--threads must be 1 or more, got {args.threads}")
    report = run_engines(args) if args.engines else run(args)
    if args.json:  # it reads no file, so nothing to keep apart from; written whole (vaswani.output_paths)
        write_text_atomically(args.json, json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
