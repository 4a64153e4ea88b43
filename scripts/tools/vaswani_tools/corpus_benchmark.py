"""The corpus workload of scripts/tools/benchmark.py (`--corpus`): a file of sentences in, a file of translations out,
as a user runs it, by this project's corpus command against CTranslate2 and the pipeline.

The shipped en->de model on Multi30k's 1,014 validation captions repeated to `--corpus_lines` lines (10,000), beam 5
(its generation config; `early_stopping=True`, the rule CTranslate2's search has, so that both compute the same
tokens) and greedy, all the machine's cores for every engine:

  * `predict`: scripts/predict.py's work (vaswani.prediction.run.predict) with its defaults: windows sorted by length,
    one one-thread worker per core (`predict_bN`: with `--batch_size N`, for each of `--corpus_predict_batch_sizes`);
  * `ct2_b32` (and `ct2_bN` for each of `--corpus_ct2_batch_sizes`): CTranslate2's `translate_iterable` on the
    model's export (scripts/export_ctranslate2.py), `max_batch_size` N, `inter_threads` = cores,
    `intra_threads` 1, the texts tokenized and the outputs detokenized by the model's tokenizer;
  * `pipeline`: transformers' `pipeline("translation", model=FOLDER, trust_remote_code=True)(lines, batch_size=32)`
    (left out with `--corpus_no_pipeline`).

Each engine runs in a fresh process, in rounds (`--rounds`), the engines' order reversed every other round; a
process times its own work (reading the file, tokenizing, decoding, writing the output) after its imports and its
model's loading, which the whole process's time (`wall_seconds`) adds. A row gives each engine's sentences/s (median
of the rounds), `predict`'s ratio to each other engine (median of the rounds' ratios), and how many output lines equal
`generate`'s (the translation pipeline on each caption alone, in this process).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


MODEL = "results/multi30k_en_de/model"
DRIVERS = {
    "predict": """
import json, sys
from vaswani.prediction.run import main
stats = main(sys.argv[1:])
print(json.dumps({"seconds": stats["seconds"]}))
""",
    "ct2": """
import json, sys, time
import ctranslate2
from transformers import AutoTokenizer
folder, corpus, output, batch_size, threads, options = sys.argv[1:7]
tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
translator = ctranslate2.Translator(folder, device="cpu", inter_threads=int(threads), intra_threads=1)
start = time.perf_counter()
with open(corpus, encoding="utf-8") as lines, open(output, "w", encoding="utf-8") as out:
    sources = (tokenizer.convert_ids_to_tokens(tokenizer(line.rstrip("\\n"))["input_ids"]) for line in lines)
    for result in translator.translate_iterable(sources, max_batch_size=int(batch_size), **json.loads(options)):
        ids = tokenizer.convert_tokens_to_ids(result.hypotheses[0])
        out.write(tokenizer.decode(ids, skip_special_tokens=True) + "\\n")
print(json.dumps({"seconds": time.perf_counter() - start}))
""",
    "pipeline": """
import json, sys, time
import transformers
folder, corpus, output, settings = sys.argv[1:5]
pipe = transformers.pipeline("translation", model=folder, trust_remote_code=True)
start = time.perf_counter()
with open(corpus, encoding="utf-8") as lines:
    texts = [line.rstrip("\\n") for line in lines]
results = pipe(texts, batch_size=32, **json.loads(settings))
with open(output, "w", encoding="utf-8") as out:
    out.write("".join(result["translation_text"] + "\\n" for result in results))
print(json.dumps({"seconds": time.perf_counter() - start}))
""",
}


def run_corpus_benchmark(args, repo: Path, cpu: str) -> dict:
    from vaswani.serving.ctranslate2_export import export_to_ctranslate2

    folder = repo / MODEL
    captions = [json.loads(line)["en"] for line in (Path(args.data_dir) / "multi30k" / "validation.jsonl")
                .read_text(encoding="utf-8").splitlines()]
    lines = (captions * (args.corpus_lines // len(captions) + 1))[: args.corpus_lines]
    threads = len(os.sched_getaffinity(0))
    report = {"workload": "corpus", "model": MODEL, "lines": len(lines), "unique_lines": len(set(lines)), "cpu": cpu,
              "cores": threads, "rounds": args.rounds, "rows": []}
    with tempfile.TemporaryDirectory(prefix="vaswani-corpus-") as scratch:
        scratch = Path(scratch)
        corpus = scratch / "corpus.en"
        corpus.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        export = export_to_ctranslate2(folder, scratch / "ct2_fp32")
        for beams in args.corpus_beams:
            settings = {"num_beams": beams, "max_new_tokens": 80}
            if beams > 1:
                settings.update(length_penalty=1.0, early_stopping=True)
            reference = _generate_outputs(folder, sorted(set(lines)), settings)
            expected = [reference[line] for line in lines]
            engines = _engines(folder, export, corpus, scratch, settings, threads, args.corpus_ct2_batch_sizes,
                               [None, *args.corpus_predict_batch_sizes], not args.corpus_no_pipeline)
            report["rows"].append(_row(engines, beams, settings, expected, args.rounds, repo))
    return report


def _engines(folder: Path, export: Path, corpus: Path, scratch: Path, settings: dict, threads: int,
             ct2_batch_sizes, predict_batch_sizes=(None,), pipeline: bool = True) -> dict[str, tuple[list[str], Path]]:
    """Engine -> (its command, the file it writes)."""
    from transformers import GenerationConfig

    from vaswani.serving.ctranslate2_export import translate_options

    python = [sys.executable, "-c"]
    flags = [f"--{name}={value}" for name, value in settings.items()]
    engines = {}
    for size in predict_batch_sizes:
        name = "predict" if size is None else f"predict_b{size}"
        output = scratch / f"{name}.de"
        engines[name] = ([*python, DRIVERS["predict"], "--model", str(folder), "--input_file", str(corpus),
                          "--output_file", str(output), "--overwrite_output_file", "--quiet", *flags,
                          *([] if size is None else ["--batch_size", str(size)])], output)
    options = json.dumps(translate_options(GenerationConfig(**settings)))
    for size in ct2_batch_sizes:
        output = scratch / f"ct2_b{size}.de"
        engines[f"ct2_b{size}"] = ([*python, DRIVERS["ct2"], str(export), str(corpus), str(output), str(size),
                                    str(threads), options], output)
    if pipeline:
        engines["pipeline"] = ([*python, DRIVERS["pipeline"], str(folder), str(corpus), str(scratch / "pipeline.de"),
                                json.dumps(settings)], scratch / "pipeline.de")
    return engines


def _row(engines: dict, beams: int, settings: dict, expected: list[str], rounds: int, repo: Path) -> dict:
    names = list(engines)
    seconds = {name: [] for name in names}
    wall = {name: [] for name in names}
    equal = {}
    load = [os.getloadavg()[0]]
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else names[::-1]:
            command, output = engines[name]
            started = time.perf_counter()
            done = subprocess.run(command, capture_output=True, text=True, cwd=repo,
                                  env={**os.environ, "HF_HUB_OFFLINE": "1"})
            if done.returncode != 0:
                raise RuntimeError(f"{name} failed: {done.stderr[-2000:]}")
            wall[name].append(time.perf_counter() - started)
            seconds[name].append(json.loads(done.stdout.strip().splitlines()[-1])["seconds"])
            written = output.read_text(encoding="utf-8").split("\n")[:-1]
            equal[name] = sum(a == b for a, b in zip(written, expected))
    load.append(os.getloadavg()[0])
    lines = len(expected)
    row = {"num_beams": beams, "settings": settings, "load_average_before_after": load,
           "sentences_per_second": {name: lines / statistics.median(values) for name, values in seconds.items()},
           "seconds": seconds, "wall_seconds": wall, "lines_equal_to_generate": equal}
    row["predict_ratio"] = {  # predict's speed over each other engine's, per round (the same engine's: 1)
        name: statistics.median(other / mine for other, mine in zip(seconds[name], seconds["predict"]))
        for name in names if name != "predict"
    }
    return row


def _generate_outputs(folder: Path, texts: list[str], settings: dict) -> dict[str, str]:
    """`generate`'s translation of each text alone (the translation pipeline, one text a call)."""
    import transformers

    pipe = transformers.pipeline("translation", model=str(folder), trust_remote_code=True)
    return {text: pipe(text, **settings)[0]["translation_text"] for text in texts}




# --- memory --------------------------------------------------------------------------------------------------------


def tree_memory_mb(pid: int) -> float:
    """The proportional set size (PSS: shared pages divided among their sharers) of a process and all its
    descendants, in MB: what the forked workers and their parent hold together, counted once."""
    total, pending = 0, [pid]
    while pending:
        current = pending.pop()
        try:
            for line in Path(f"/proc/{current}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
            for task in Path(f"/proc/{current}/task").iterdir():
                pending += [int(child) for child in (task / "children").read_text().split()]
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
    return total / 1024


def peak_memory(command: list[str], interval: float = 0.1) -> dict:
    """Run `command`, sampling its process tree's memory every `interval` seconds: the peak (MB) and the seconds."""
    started = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               env={**os.environ, "HF_HUB_OFFLINE": "1"})
    peak = 0.0
    while process.poll() is None:
        peak = max(peak, tree_memory_mb(process.pid))
        time.sleep(interval)
    if process.returncode != 0:
        raise RuntimeError(f"{command[:4]} failed: {process.stderr.read()[-2000:]}")
    return {"peak_mb": peak, "seconds": time.perf_counter() - started}


def run_memory_benchmark(args, repo: Path, cpu: str) -> dict:
    """scripts/predict.py's peak memory (the whole process tree) against the corpus's size, at each of
    `--memory_lines` lines: Multi30k's validation captions, repeated, translated greedily to one token each by a
    model of the `tiny` preset with random weights and the shipped en->de tokenizer. The work per line is small on
    purpose (the shipped model translates about 1,200 captions a second greedy on two cores: ten million lines would
    take over two hours): what is measured is the command's memory, which reading, sorting, batching, writing and
    recording windows could make grow with the corpus."""
    import torch
    from transformers import AutoTokenizer

    from vaswani import VaswaniConfig, VaswaniForConditionalGeneration

    texts = [json.loads(line)["en"] for line in (Path(args.data_dir) / "multi30k" / "validation.jsonl")
             .read_text(encoding="utf-8").splitlines()]
    report = {"workload": "corpus_memory", "model": "tiny preset, random weights, results/multi30k_en_de/model's "
              "tokenizer; greedy, 1 new token", "cpu": cpu, "rows": []}
    with tempfile.TemporaryDirectory(prefix="vaswani-memory-") as scratch:
        scratch = Path(scratch)
        folder = scratch / "translator"
        tokenizer = AutoTokenizer.from_pretrained(repo / MODEL)
        torch.manual_seed(0)
        config = VaswaniConfig.from_preset("tiny", vocab_size=len(tokenizer), source_lang="en", target_lang="de")
        VaswaniForConditionalGeneration(config).save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        for count in args.memory_lines:
            corpus = scratch / "corpus.en"
            with corpus.open("w", encoding="utf-8") as out:
                for start in range(0, count, len(texts)):
                    out.write("".join(text + "\n" for text in texts[: count - start]))
            output = scratch / "out.de"
            command = [sys.executable, str(repo / "scripts" / "predict.py"), "--model", str(folder), "--input_file",
                       str(corpus), "--output_file", str(output), "--quiet", "--overwrite_output_file",
                       "--num_beams", "1", "--max_new_tokens", "1"]
            measured = peak_memory(command)
            with output.open("rb") as lines:
                written = sum(block.count(b"\n") for block in iter(lambda: lines.read(1 << 20), b""))
            report["rows"].append({"lines": count, "output_lines": written, **measured,
                                   "lines_per_second": count / measured["seconds"]})
            corpus.unlink()
            output.unlink()
    return report

__all__ = ["peak_memory", "run_corpus_benchmark", "run_memory_benchmark", "tree_memory_mb"]
