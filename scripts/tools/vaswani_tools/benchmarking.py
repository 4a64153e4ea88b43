"""Speed measurements: what they share (scripts/tools/benchmark.py, scripts/tools/gpu_suite.py): a benchmark's setup,
this project's model and transformers' Marian built with the identical architecture, a random batch, the analytic
FLOPs of a training step, and the matrix-multiply peak of the device, measured in the same run, that model FLOPs
utilization (MFU) is taken against; then the benchmark of scripts/tools/benchmark.py (`run_benchmark`, what it
measures is in the command's docstring): this model against Marian in training and generation, or with --engines
generation in every engine, CTranslate2 included.
"""

import copy
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from transformers import MarianConfig, MarianMTModel

from vaswani.remote_code.configuration_vaswani import VaswaniConfig
from vaswani.remote_code.modeling_vaswani import VaswaniForConditionalGeneration
from vaswani.output_paths import check_output_file, read_json_object, write_text_atomically
from vaswani.remote_code.proc_files import proc_field
from vaswani.serving.cpu_inference import for_cpu_inference
from vaswani.remote_code.tokenization_vaswani import VaswaniTokenizer


@dataclass
class Setup:
    preset: str
    precision: str  # "fp32" or "bf16" (autocast)
    batch_size: int
    source_length: int
    target_length: int
    vocab_size: int
    device: str


def vaswani_model(setup: Setup, **options) -> VaswaniForConditionalGeneration:
    config = VaswaniConfig.from_preset(setup.preset, vocab_size=setup.vocab_size, **options)
    config._attn_implementation = "sdpa"
    return VaswaniForConditionalGeneration(config)


def marian_model(setup: Setup) -> MarianMTModel:
    """Marian with exactly our architecture: post-LN, ReLU, sinusoidal positions, scaled and tied embeddings."""
    ours = VaswaniConfig.from_preset(setup.preset, vocab_size=setup.vocab_size)
    config = MarianConfig(
        vocab_size=ours.vocab_size,
        d_model=ours.d_model,
        encoder_layers=ours.encoder_layers,
        decoder_layers=ours.decoder_layers,
        encoder_attention_heads=ours.encoder_attention_heads,
        decoder_attention_heads=ours.decoder_attention_heads,
        encoder_ffn_dim=ours.encoder_ffn_dim,
        decoder_ffn_dim=ours.decoder_ffn_dim,
        activation_function="relu",
        dropout=ours.dropout,
        attention_dropout=ours.attention_dropout,
        activation_dropout=ours.activation_dropout,
        max_position_embeddings=ours.max_position_embeddings,
        scale_embedding=True,
        share_encoder_decoder_embeddings=True,
        tie_word_embeddings=True,
        pad_token_id=ours.pad_token_id,
        eos_token_id=ours.eos_token_id,
        decoder_start_token_id=ours.decoder_start_token_id,
        bos_token_id=ours.bos_token_id,
        forced_eos_token_id=None,
    )
    config._attn_implementation = "sdpa"
    return MarianMTModel(config)


def make_batch(setup: Setup, seed: int = 0) -> dict:
    generator = torch.Generator().manual_seed(seed)
    shape_source, shape_target = (setup.batch_size, setup.source_length), (setup.batch_size, setup.target_length)
    return {
        "input_ids": torch.randint(4, setup.vocab_size, shape_source, generator=generator).to(setup.device),
        "attention_mask": torch.ones(shape_source, dtype=torch.long, device=setup.device),
        "labels": torch.randint(4, setup.vocab_size, shape_target, generator=generator).to(setup.device),
    }


def autocast(setup: Setup):
    return torch.autocast(device_type=setup.device.split(":")[0], dtype=torch.bfloat16, enabled=setup.precision == "bf16")


def synchronize(setup: Setup):
    if setup.device.startswith("cuda"):
        torch.cuda.synchronize()


def training_flops(config: VaswaniConfig, setup: Setup) -> float:
    """Analytic FLOPs of one training step (forward + backward = 3x the forward's matrix products)."""
    d, b, s, t, v = config.d_model, setup.batch_size, setup.source_length, setup.target_length, config.vocab_size
    encoder_layer = 4 * d * d + 2 * d * config.encoder_ffn_dim  # q, k, v, out projections + feed-forward
    decoder_layer = 8 * d * d + 2 * d * config.decoder_ffn_dim  # self- and cross-attention + feed-forward
    forward = 2 * b * (s * config.encoder_layers * encoder_layer + t * config.decoder_layers * decoder_layer)
    forward += 2 * b * t * d * v  # output projection
    # attention scores and weighted sums: 2 products of (length x length x d) per attention block
    forward += 2 * 2 * b * d * (config.encoder_layers * s * s + config.decoder_layers * (t * t + t * s))
    return 3 * forward


def matmul_peak(setup: Setup, dtype: torch.dtype, size: int = 2048, repeats: int = 5, per_round: int = 1) -> float:
    """Best FLOP/s of a square matrix product on this device: the best of `repeats` rounds (after two warm-up rounds)
    of `per_round` products issued back to back between two synchronizations. On a GPU one product of a small matrix
    times its launch and the synchronization, not the GPU: one 1024 x 1024 bf16 product read 79 TFLOP/s on an H100
    that does about 800, which made every MFU on that machine 10x too high."""
    a = torch.randn(size, size, device=setup.device, dtype=dtype)
    b = torch.randn(size, size, device=setup.device, dtype=dtype)
    best = math.inf
    for _ in range(repeats + 2):
        synchronize(setup)
        start = time.perf_counter()
        for _ in range(per_round):
            a @ b
        synchronize(setup)
        best = min(best, (time.perf_counter() - start) / per_round)
    return 2 * size**3 / best


def cpu_name() -> str:
    """The processor's model name from /proc/cpuinfo (platform.processor() is often empty on Linux)."""
    return proc_field("/proc/cpuinfo", "model name") or platform.processor() or "CPU"



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


def _time_steps(step, steps: int, setup: Setup) -> float:
    synchronize(setup)
    start = time.perf_counter()
    for _ in range(steps):
        step()
    synchronize(setup)
    return (time.perf_counter() - start) / steps


def _alternate(functions: dict, rounds: int, steps: int, warmup: int, setup: Setup) -> dict[str, float]:
    """Median seconds per call of each function, measured in alternating rounds."""
    for function in functions.values():
        for _ in range(warmup):
            function()
    seconds = {name: [] for name in functions}
    for _ in range(rounds):
        for name, function in functions.items():
            seconds[name].append(_time_steps(function, steps, setup))
    return {name: statistics.median(values) for name, values in seconds.items()}


def peak_memory_mb(model_name: str, setup: Setup, steps: int = 3) -> float:
    """Peak memory of training steps above the model at rest (activations, gradients, optimizer state), in MiB,
    measured in a fresh process."""
    code = (
        f"import json, sys; sys.path.insert(0, {str(TOOLS)!r}); from vaswani_tools import benchmarking as b; "
        f"print(json.dumps(b._measure_memory({model_name!r}, b.Setup(**{asdict(setup)!r}), {steps})))"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
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


def _generation_function(model, setup: Setup, new_tokens: int, num_beams: int):
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

ENGINES = ("vaswani", "default_generate", "default_pipeline", "cpu_inference_fp32", "cpu_inference_int8", "marian",
           "ct2_fp32", "ct2_int8")
TOOLS = Path(__file__).resolve().parents[1]  # scripts/tools/, where the package vaswani_tools is
REPO = TOOLS.parents[1]  # the checkout
# the shipped models timed as they are used: a batch of the first held-out inputs, decoded as their generation
# config says (beam count aside), up to its max_new_tokens; each is (data file under --data_dir, text column)
SHIPPED_WORKLOADS = {
    "multi30k_en_de": ("multi30k/test_2016_flickr.jsonl", "en"),
    "multi30k_de_en": ("multi30k/test_2016_flickr.jsonl", "de"),
    "samsum": ("samsum/validation.jsonl", "document"),
}
# the pipeline task of each shipped workload (the `default_pipeline` engine)
SHIPPED_TASKS = {"multi30k_en_de": "translation", "multi30k_de_en": "translation", "samsum": "summarization"}
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
    folder: Path  # the checkpoint of the models (saved to the scratch folder for a preset)
    texts: list | None = None  # a shipped workload's inputs as text, and its pipeline task (`default_pipeline`)
    task: str | None = None
    pipeline: object = None  # that pipeline, built once (`default_pipeline`)


def _ctranslate2_export(model, folder: Path, quantization: str | None) -> Path:
    """`model` exported to CTranslate2 in `folder` (saved first with a small tokenizer: the ids it lacks get
    placeholder names in the exported vocabulary, which is all the benchmark's random inputs need)."""
    from vaswani.serving.ctranslate2_export import export_to_ctranslate2

    checkpoint = folder / "checkpoint"
    if not checkpoint.is_dir():
        model.save_pretrained(checkpoint)
        VaswaniTokenizer.train_from_texts(["a b c"], vocab_size=300, min_frequency=1).save_pretrained(checkpoint)
    return export_to_ctranslate2(checkpoint, folder / f"ct2_{quantization or 'fp32'}", quantization=quantization)


def _preset_workload(preset: str, args, scratch: Path) -> Workload:
    """A preset with random weights on a random batch, every engine forced to `--new-tokens` new tokens."""
    setup = Setup(preset, "fp32", args.batch_size or 32, args.source_length, args.target_length, args.vocab_size, "cpu")
    torch.manual_seed(0)
    ours = vaswani_model(setup).eval()
    models = {
        "vaswani": ours,
        "default_generate": copy.deepcopy(ours),
        "cpu_inference_fp32": for_cpu_inference(copy.deepcopy(ours)),
        "cpu_inference_int8": for_cpu_inference(ours, quantization="int8"),
        "marian": marian_model(setup),
    }
    exports = {f"ct2_{q or 'fp32'}": _ctranslate2_export(ours, scratch / preset, q) for q in (None, "int8")}
    batch = make_batch(setup, seed=1)
    vocabulary = json.loads((exports["ct2_fp32"] / "shared_vocabulary.json").read_text(encoding="utf-8"))
    sources = [[vocabulary[index] for index in row] for row in batch["input_ids"].tolist()]
    settings = {"max_new_tokens": args.new_tokens, "min_new_tokens": args.new_tokens}
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}
    folder = scratch / preset / "checkpoint"  # where _ctranslate2_export saved the model
    return Workload(preset, setup, models, exports, inputs, sources, settings, forced_length=True, folder=folder)


def _shipped_workload(name: str, args, scratch: Path) -> Workload:
    """A shipped model (results/NAME/model) on the first `--batch-size` (default 64) inputs of its held-out data, in
    one padded batch, decoded with its generation config's length limit, length penalty and n-gram rule."""
    from transformers import AutoTokenizer, GenerationConfig

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
        "default_generate": copy.deepcopy(ours),
        "cpu_inference_fp32": for_cpu_inference(copy.deepcopy(ours)),
        "cpu_inference_int8": for_cpu_inference(ours, quantization="int8"),
    }
    exports = {f"ct2_{q or 'fp32'}": export_to_ctranslate2(folder, scratch / name / f"ct2_{q or 'fp32'}", quantization=q)
               for q in (None, "int8")}
    inputs = tokenizer(texts, return_tensors="pt", padding=True, truncation=True)
    inputs = {"input_ids": inputs["input_ids"], "attention_mask": inputs["attention_mask"]}
    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(texts, truncation=True)["input_ids"]]
    settings = generation_settings(GenerationConfig.from_pretrained(folder))
    setup = Setup(name, "fp32", len(texts), inputs["input_ids"].shape[1], 0, ours.config.vocab_size, "cpu")
    task = SHIPPED_TASKS[name]
    return Workload(name, setup, models, exports, inputs, sources, settings, forced_length=False, folder=folder,
                    texts=texts, task=task, pipeline=default_pipeline(task, folder))


def _generate_function(model, workload: Workload, num_beams: int, early_stopping: bool = True, **options):
    """One `generate` call of `model` on the workload's batch (returns the output ids); `options` go to generate."""

    settings = {**search_settings(workload.settings, num_beams, early_stopping), **options}

    @torch.no_grad()
    def generate():
        out = model.generate(**workload.inputs, do_sample=False, **settings)
        if workload.forced_length:
            assert out.shape[1] == workload.settings["max_new_tokens"] + 1, out.shape
        return out

    return generate


def generation_settings(generation_config) -> dict:
    """The `generate` settings a shipped model decodes with, from its generation config: its length limit, its length
    penalty and its n-gram rule (`search_settings` adds the search's)."""
    settings = {"max_new_tokens": generation_config.max_new_tokens, "length_penalty": generation_config.length_penalty}
    if generation_config.no_repeat_ngram_size:
        settings["no_repeat_ngram_size"] = generation_config.no_repeat_ngram_size
    return settings


def search_settings(settings: dict, num_beams: int, early_stopping: bool = True) -> dict:
    """`generate` settings (a workload's, or `generation_settings`) with `num_beams` (a length penalty only for beam
    search).

    Beam search stops as CTranslate2's does, which has no other rule: an input is over once `num_beams` hypotheses
    have finished, transformers' `early_stopping=True`. So every engine of a row searches alike and computes the same
    tokens (the row checks CTranslate2 fp32's against `generate`'s). transformers' default, `early_stopping=False`
    (the shipped generation configs'), goes on while a running beam might still beat the worst finished one: more
    steps for the same inputs, which only this project's engines can run (`early_stopping=False` here: the row's
    `cpu_inference_fp32_early_stopping_false`)."""
    settings = {**settings, "num_beams": num_beams}
    if num_beams == 1:
        settings.pop("length_penalty", None)
    else:
        settings["early_stopping"] = early_stopping
    return settings


def default_pipeline(task: str, folder: Path):
    """The pipeline a user builds from the shipped folder, as the README shows it: transformers' `pipeline(task,
    model=FOLDER, trust_remote_code=True)`, which runs the checkpoint's own code."""
    import transformers

    return transformers.pipeline(task, model=str(folder), trust_remote_code=True)


def _pipeline_function(pipe, workload: Workload, num_beams: int):
    """One call of `pipe` on the workload's texts, as one batch, with the row's decoding settings (returns the
    texts)."""
    settings = search_settings(workload.settings, num_beams)
    key = "translation_text" if workload.task == "translation" else "summary_text"

    def call():
        return [output[key] for output in pipe(workload.texts, batch_size=len(workload.texts), **settings)]

    return call


def _ctranslate2_options(workload: Workload, num_beams: int) -> dict:
    from transformers import GenerationConfig

    from vaswani.serving.ctranslate2_export import translate_options

    return translate_options(GenerationConfig(**search_settings(workload.settings, num_beams)))


def _ctranslate2_function(folder: Path, sources: list, options: dict, threads: int):
    import ctranslate2

    translator = ctranslate2.Translator(str(folder), device="cpu", inter_threads=1, intra_threads=threads)

    def generate():
        return translator.translate_batch(sources, max_batch_size=len(sources), **options)

    return generate


def generated_tokens(output: torch.Tensor, eos_token_id: int) -> list[list[int]]:
    """The new tokens of each row of `generate`'s output, up to its first end token (excluded), as CTranslate2
    returns a hypothesis."""
    rows = []
    for row in output[:, 1:].tolist():
        rows.append(row[: row.index(eos_token_id)] if eos_token_id in row else row)
    return rows


def _ctranslate2_tokens(results, workload: Workload) -> list[list[int]]:
    """The best hypothesis of each of CTranslate2's results as token ids of the workload's vocabulary."""
    vocabulary = json.loads((workload.exports["ct2_fp32"] / "shared_vocabulary.json").read_text(encoding="utf-8"))
    ids = {token: index for index, token in enumerate(vocabulary)}
    return [[ids[token] for token in result.hypotheses[0]] for result in results]


def _ctranslate2_alone(folder: Path, sources: list, options: dict, threads: int, rounds: int, scratch: Path) -> float:
    """Median seconds of one CTranslate2 call timed in a fresh process that runs nothing else: beside PyTorch's
    thread pool, CTranslate2 lost about a quarter of its 2-thread speed on the 2-core machine of the serving table
    (results/benchmark/README.md), so its in-process figure alone would flatter this model."""
    job = scratch / "ctranslate2_job.json"
    job.write_text(json.dumps({"folder": str(folder), "sources": sources, "options": options}), encoding="utf-8")
    setup = (  # ctranslate2 alone: no torch, no transformers in that process
        "import ctranslate2\n"
        f"job = json.loads(open({str(job)!r}, encoding='utf-8').read())\n"
        f"translator = ctranslate2.Translator(job['folder'], device='cpu', inter_threads=1, intra_threads={threads})\n"
    )
    call = "translator.translate_batch(job['sources'], max_batch_size=len(job['sources']), **job['options'])"
    return _time_alone(setup, call, rounds)


def _time_alone(setup: str, call: str, rounds: int) -> float:
    """Median seconds of `call` (one line of Python) in a fresh Python process that runs `setup` first, then the call
    once untimed and `rounds` times back to back."""
    code = (
        "import json, statistics, time\n" + setup + f"def call():\n    {call}\n"
        "call()\n"
        "seconds = []\n"
        f"for _ in range({rounds}):\n"
        "    start = time.perf_counter(); call(); seconds.append(time.perf_counter() - start)\n"
        "print(json.dumps(statistics.median(seconds)))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _cpu_inference_alone(workload: Workload, num_beams: int, threads: int, rounds: int, scratch: Path,
                         quantization: str = "fp32") -> float:
    """Median seconds of one `cpu_inference_fp32` call (`cpu_inference_int8` with `quantization="int8"`) timed as
    `_ctranslate2_alone` times CTranslate2: in a fresh process that runs nothing else, rounds back to back after one
    untimed call, so that both sides of the ratio `cpu_inference_fp32_alone_vs_ct2_fp32_alone` are measured alike (in
    the alternating rounds every call follows another engine's turn). The inputs travel as safetensors (no pickle)."""
    from safetensors.torch import save_file

    inputs = scratch / f"{workload.name}_inputs.safetensors"
    save_file({name: tensor.contiguous() for name, tensor in workload.inputs.items()}, inputs)
    job = scratch / f"cpu_inference_{quantization}_job.json"
    job.write_text(json.dumps({"folder": str(workload.folder), "inputs": str(inputs),
                               "settings": search_settings(workload.settings, num_beams)}), encoding="utf-8")
    setup = (  # this model alone: no CTranslate2 in that process
        "import torch\n"
        f"torch.set_num_threads({threads})\n"
        "from safetensors.torch import load_file\n"
        "from vaswani import VaswaniForConditionalGeneration\n"
        "from vaswani.serving.cpu_inference import for_cpu_inference\n"
        f"job = json.loads(open({str(job)!r}, encoding='utf-8').read())\n"
        "model = for_cpu_inference(VaswaniForConditionalGeneration.from_pretrained(job['folder']), "
        f"quantization={quantization!r})\n"
        "inputs = load_file(job['inputs'])\n"
    )
    call = "with torch.no_grad(): model.generate(**inputs, do_sample=False, **job['settings'])"
    return _time_alone(setup, call, rounds)


def _default_pipeline_alone(workload: Workload, num_beams: int, threads: int, rounds: int, scratch: Path) -> float:
    """Median seconds of one `default_pipeline` call timed as `_ctranslate2_alone` times CTranslate2, in a fresh
    process where this package is not imported: what a user of the folder alone gets."""
    job = scratch / "default_pipeline_job.json"
    job.write_text(json.dumps({"folder": str(workload.folder), "task": workload.task, "texts": workload.texts,
                               "settings": search_settings(workload.settings, num_beams)}), encoding="utf-8")
    setup = (
        "import sys\n"
        "sys.modules['vaswani'] = None  # the checkpoint's own code only\n"
        "import torch\n"
        f"torch.set_num_threads({threads})\n"
        "from transformers import pipeline\n"
        f"job = json.loads(open({str(job)!r}, encoding='utf-8').read())\n"
        "pipe = pipeline(job['task'], model=job['folder'], trust_remote_code=True)\n"
    )
    call = "pipe(job['texts'], batch_size=len(job['texts']), **job['settings'])"
    return _time_alone(setup, call, rounds)


def new_tokens(output: torch.Tensor, pad_token_id: int) -> int:
    """The tokens `generate` produced (the end token counted, the padding after it and the start token not)."""
    return int((output[:, 1:] != pad_token_id).sum())


def _load_average() -> float:
    """The machine's load over the last minute (os.getloadavg): beside each row, how busy the cores were."""
    return round(os.getloadavg()[0], 2)


def _engine_row(workload: Workload, threads: int, beams: int, args, scratch: Path) -> dict:
    """One row of the table: every engine of the workload, alternating in this process; this model's loop and
    CTranslate2 alone, in `--alone_pairs` pairs of fresh processes."""
    options = _ctranslate2_options(workload, beams)
    calls = {name: _generate_function(model, workload, beams) for name, model in workload.models.items()}
    calls["vaswani"] = _generate_function(workload.models["vaswani"], workload, beams, cpu_decoding=False)
    if workload.pipeline is not None:
        calls["default_pipeline"] = _pipeline_function(workload.pipeline, workload, beams)
    if beams > 1:  # the shipped configs' stopping rule, which CTranslate2 cannot run (see search_settings)
        calls["cpu_inference_fp32_early_stopping_false"] = _generate_function(
            workload.models["cpu_inference_fp32"], workload, beams, early_stopping=False)
    calls.update({name: _ctranslate2_function(folder, workload.sources, options, threads)
                  for name, folder in workload.exports.items()})
    load_before = _load_average()
    seconds = _alternate(calls, args.rounds, 1, 1, workload.setup)
    plain, ours = calls["vaswani"](), calls["cpu_inference_fp32"]()
    config = workload.models["vaswani"].config
    tokens = new_tokens(plain, config.pad_token_id)  # what the plain model generates: the work every engine does
    row = {"workload": workload.name, "threads": threads, "num_beams": beams, "batch": workload.setup.batch_size,
           "source_length": workload.setup.source_length, "new_tokens": tokens,
           "cpu_inference_fp32_same_tokens": plain.tolist() == ours.tolist(),
           "default_generate_same_tokens": plain.tolist() == calls["default_generate"]().tolist(),
           "ct2_fp32_same_tokens": _ctranslate2_tokens(calls["ct2_fp32"](), workload)
           == generated_tokens(plain, config.eos_token_id),
           "load_average": [load_before, _load_average()]}
    if "default_pipeline" in calls:  # its texts against the plain model's tokens decoded
        row["default_pipeline_same_text"] = calls["default_pipeline"]() == workload.pipeline.tokenizer.batch_decode(
            plain, skip_special_tokens=True)
    if beams > 1:  # a longer search: its own tokens
        row["cpu_inference_fp32_early_stopping_false_new_tokens"] = new_tokens(
            calls["cpu_inference_fp32_early_stopping_false"](), config.pad_token_id)
    for name, value in seconds.items():
        row[f"{name}_ms"] = 1000 * value
        row[f"{name}_tokens_per_s"] = row.get(f"{name}_new_tokens", tokens) / value
    # this model and CTranslate2 fp32 each in fresh processes, in pairs (the first of a pair alternating): the ratio
    # is the median of the pairs' ratios, so that the machine's drift between processes cancels
    timers = {
        "cpu_inference_fp32": lambda: _cpu_inference_alone(workload, beams, threads, args.rounds, scratch),
        "ct2_fp32": lambda: _ctranslate2_alone(workload.exports["ct2_fp32"], workload.sources, options, threads,
                                               args.rounds, scratch),
        "cpu_inference_int8": lambda: _cpu_inference_alone(workload, beams, threads, args.rounds, scratch, "int8"),
        "ct2_int8": lambda: _ctranslate2_alone(workload.exports["ct2_int8"], workload.sources, options, threads,
                                               args.rounds, scratch),
    }
    if workload.task is not None:  # the default pipeline, timed alike and paired with the same CTranslate2 runs
        timers["default_pipeline"] = lambda: _default_pipeline_alone(workload, beams, threads, args.rounds, scratch)
    pairs, pipeline_pairs, int8_pairs = [], [], []
    for index in range(args.alone_pairs):
        timings = {name: timers[name]() for name in (list(timers) if index % 2 == 0 else list(timers)[::-1])}
        pairs.append((timings["cpu_inference_fp32"], timings["ct2_fp32"]))
        int8_pairs.append((timings["cpu_inference_int8"], timings["ct2_int8"]))
        if "default_pipeline" in timings:
            pipeline_pairs.append((timings["default_pipeline"], timings["ct2_fp32"]))
    row["alone_pairs"] = [[1000 * ours, 1000 * theirs] for ours, theirs in pairs]  # milliseconds
    if pipeline_pairs:
        row["default_pipeline_alone_pairs"] = [[1000 * ours, 1000 * theirs] for ours, theirs in pipeline_pairs]
        row["default_pipeline_alone_ms"] = 1000 * statistics.median(ours for ours, _ in pipeline_pairs)
        row["default_pipeline_alone_vs_ct2_fp32_alone"] = statistics.median(
            theirs / ours for ours, theirs in pipeline_pairs)
    row["int8_alone_pairs"] = [[1000 * ours, 1000 * theirs] for ours, theirs in int8_pairs]
    alone = {"cpu_inference_fp32_alone": statistics.median(ours for ours, _ in pairs),
             "ct2_fp32_alone": statistics.median(theirs for _, theirs in pairs),
             "cpu_inference_int8_alone": statistics.median(ours for ours, _ in int8_pairs),
             "ct2_int8_alone": statistics.median(theirs for _, theirs in int8_pairs)}
    for name, value in alone.items():
        row[f"{name}_ms"] = 1000 * value
        row[f"{name}_tokens_per_s"] = tokens / value
    for name in ("vaswani", "default_generate", "default_pipeline", "cpu_inference_fp32",
                 "cpu_inference_fp32_early_stopping_false", "marian"):
        if name in seconds:
            row[f"{name}_vs_ct2_fp32"] = seconds["ct2_fp32"] / seconds[name]
            row[f"{name}_vs_ct2_fp32_alone"] = alone["ct2_fp32_alone"] / seconds[name]
    row["cpu_inference_fp32_alone_vs_ct2_fp32_alone"] = statistics.median(theirs / ours for ours, theirs in pairs)
    row["cpu_inference_int8_vs_ct2_int8"] = seconds["ct2_int8"] / seconds["cpu_inference_int8"]
    row["cpu_inference_int8_vs_ct2_int8_alone"] = alone["ct2_int8_alone"] / seconds["cpu_inference_int8"]
    row["cpu_inference_int8_alone_vs_ct2_int8_alone"] = statistics.median(theirs / ours for ours, theirs in int8_pairs)
    if args.profile:  # where the decoder's calls spend their time (one profiled call each)
        for name in ("cpu_inference_fp32", "cpu_inference_int8"):
            row[f"{name}_shares"] = decoder_shares(calls[name], workload.setup)
            print(f"    {name}: " + ", ".join(f"{group} {share:.0%}" for group, share in row[f"{name}_shares"].items()),
                  flush=True)
    return row


def _compare_engines(args) -> dict:
    """Generation time of every engine on every workload, at each thread count, greedy and beam-4 (see the module
    docstring)."""
    report = {"device": cpu_name(), "torch": torch.__version__, "engines": []}
    print(f"device: {report['device']}; torch {torch.__version__}")
    with tempfile.TemporaryDirectory(prefix="vaswani-benchmark-") as scratch:
        scratch = Path(scratch)
        for name in args.workloads:
            workload = (_shipped_workload if name in SHIPPED_WORKLOADS else _preset_workload)(name, args, scratch)
            for threads in args.threads:
                torch.set_num_threads(threads)
                for beams in (1, 4):
                    row = _engine_row(workload, threads, beams, args, scratch)
                    report["engines"].append(row)
                    names = [key[: -len("_ms")] for key in row if key.endswith("_ms")]
                    print(
                        f"generate {name} {threads} thread(s) beams={beams} (load {row['load_average']}): "
                        + " | ".join(f"{engine} {row[engine + '_ms']:.0f} ms" for engine in names)
                        + f"; vs CTranslate2 fp32 (in process / alone): vaswani x{row['vaswani_vs_ct2_fp32']:.2f} / "
                        f"x{row['vaswani_vs_ct2_fp32_alone']:.2f}, "
                        f"cpu_inference_fp32 x{row['cpu_inference_fp32_vs_ct2_fp32']:.2f} / "
                        f"x{row['cpu_inference_fp32_vs_ct2_fp32_alone']:.2f}, both alone "
                        f"x{row['cpu_inference_fp32_alone_vs_ct2_fp32_alone']:.2f}"
                        + (f", default pipeline alone x{row['default_pipeline_alone_vs_ct2_fp32_alone']:.2f}"
                           if "default_pipeline_alone_vs_ct2_fp32_alone" in row else "")
                        + f" (same tokens as generate: {row['cpu_inference_fp32_same_tokens']}, default generate "
                        f"{row['default_generate_same_tokens']}, CTranslate2 fp32 {row['ct2_fp32_same_tokens']}); "
                        "int8 vs CTranslate2 int8 "
                        f"x{row['cpu_inference_int8_vs_ct2_int8']:.2f} / "
                        f"x{row['cpu_inference_int8_vs_ct2_int8_alone']:.2f}, "
                        f"both alone x{row['cpu_inference_int8_alone_vs_ct2_int8_alone']:.2f}"
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


def _operator_seconds(function, setup: Setup, group_of, calls: int = 1) -> tuple[dict[str, float], float]:
    """Profile `calls` calls of `function` (after one outside the profile: first-call work, allocations, autotuning,
    is not what a call costs): the self time of every operator (device time on a GPU) summed by `group_of(name)`,
    in seconds, and the wall time of the profiled calls. Self times do not count nested operators twice; the
    profiler's own cost lands in the wall time, never in an operator."""
    from torch.profiler import ProfilerActivity, profile

    on_gpu = setup.device.startswith("cuda")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    function()
    with profile(activities=activities) as profiler:
        synchronize(setup)
        start = time.perf_counter()
        for _ in range(calls):
            function()
        synchronize(setup)
        wall = time.perf_counter() - start
    seconds: dict[str, float] = {}
    for event in profiler.key_averages():
        group = group_of(event.key)
        seconds[group] = seconds.get(group, 0.0) + (
            event.self_device_time_total if on_gpu else event.self_cpu_time_total) / 1e6
    return seconds, wall


def kernel_shares(function, setup: Setup, calls: int = 1) -> dict[str, float]:
    """Share of `function`'s time spent in matrix products and in attention kernels: their operators' self time
    (`_operator_seconds`) over the wall time of the same profiled calls. The profiler's cost can only make the shares
    smaller, and the ceiling computed from them larger."""
    seconds, wall = _operator_seconds(function, setup, kernel_group, calls)
    return {group: seconds.get(group, 0.0) / wall for group in ("matrix products", "attention kernels")}


# The CPU decoder's operators by what they compute (`decoder_shares`): names as torch.profiler reports them, exactly,
# or, ending in "*", their beginning
DECODER_GROUPS = {
    "layer products": ("aten::addmm", "aten::mm", "mkldnn::_linear_pointwise", "quantized::linear_dynamic"),
    "attention": ("aten::bmm", "aten::baddbmm", "aten::_softmax", "aten::_scaled_dot_product*"),
    "search": ("aten::_log_softmax", "aten::topk", "aten::amax", "aten::argmax", "aten::sort"),
}


def _decoder_group(operator: str) -> str:
    for group, names in DECODER_GROUPS.items():
        if any(operator == name or (name.endswith("*") and operator.startswith(name[:-1])) for name in names):
            return group
    return "other operators"


def decoder_shares(function, setup: Setup) -> dict[str, float]:
    """Where one call of `function` (a CPU `generate`) spends its wall time: each group of DECODER_GROUPS and every
    other operator (their self times, `_operator_seconds`), and "python and dispatch", the wall time no operator
    accounts for (the Python around the operators and the dispatch into them; the profiler's own cost lands there
    too, so it is an upper bound). The shares sum to 1."""
    seconds, wall = _operator_seconds(function, setup, _decoder_group)
    shares = {group: seconds.get(group, 0.0) / wall for group in [*DECODER_GROUPS, "other operators"]}
    shares["python and dispatch"] = 1 - sum(shares.values())
    return shares


def _profile_row(row: dict, functions: dict, setup: Setup) -> None:
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


def _compare_models(args) -> dict:
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
            seconds = _alternate(steps, args.rounds, args.steps, args.warmup, setup)
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
                _profile_row(row, steps, setup)
            del ours, marian, steps

            if preset in args.generation_presets:
                torch.manual_seed(0)
                ours, marian = vaswani_model(setup), marian_model(setup)
                for beams in (1, 4):
                    calls = {
                        "vaswani": _generation_function(ours, setup, args.new_tokens, beams),
                        "marian": _generation_function(marian, setup, args.new_tokens, beams),
                    }
                    seconds = _alternate(calls, args.rounds, 1, 1, setup)
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
                        _profile_row(row, calls, setup)
                del ours, marian
    return report


def run_benchmark(args) -> dict:
    """The benchmark scripts/tools/benchmark.py runs (`args`: its options): the models compared (`_compare_models`),
    or with --engines the engines (`_compare_engines`); the report, also written to --json if given."""
    if args.json:  # checked before the measurements: it reads no file, so nothing to keep apart from
        check_output_file(args.json, {}, option="--json", replaces=lambda path: read_json_object(path) is not None)
    if getattr(args, "corpus", False) or getattr(args, "memory_lines", None):
        from .corpus_benchmark import run_corpus_benchmark, run_memory_benchmark

        run = run_memory_benchmark if args.memory_lines else run_corpus_benchmark
        report = run(args, REPO, cpu_name())
    else:
        report = _compare_engines(args) if args.engines else _compare_models(args)
    if args.json:  # written whole (vaswani.output_paths)
        write_text_atomically(args.json, report_json(report), "--json")
    return report


def report_json(report: dict) -> str:
    """The report as JSON, each row of a list (a table's rows) on one line: a run of every engine is 38 KB so, against
    48 KB with every field on its own line (results/ keeps within a size budget)."""
    entries = []
    for key, value in report.items():
        if isinstance(value, list) and value and all(isinstance(row, dict) for row in value):
            rows = ",\n".join(f"  {json.dumps(row)}" for row in value)
            entries.append(f"{json.dumps(key)}: [\n{rows}\n ]")
        else:
            entries.append(f"{json.dumps(key)}: {json.dumps(value)}")
    return "{\n " + ",\n ".join(entries) + "\n}\n"


__all__ = [
    "ENGINES",
    "REPO",
    "Setup",
    "WORKLOADS",
    "autocast",
    "cpu_name",
    "decoder_shares",
    "generated_tokens",
    "generation_settings",
    "kernel_group",
    "kernel_shares",
    "make_batch",
    "marian_model",
    "matmul_peak",
    "peak_memory_mb",
    "proc_field",
    "run_benchmark",
    "search_settings",
    "synchronize",
    "training_flops",
    "training_step_function",
    "vaswani_model",
]
