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
    python scripts/tools/benchmark.py --corpus --rounds 3         # a file translated: scripts/predict.py vs CTranslate2

With --engines, only generation is timed, on the CPU, fp32 weights unless named: this model's `generate` with
transformers' loop (`vaswani`, `cpu_decoding=False`), as a user gets it with no set-up (`default_generate`, the
model's own CPU decoder; `default_pipeline`, transformers' `pipeline(task, model=FOLDER, trust_remote_code=True)` on
the texts, shipped models only), after `vaswani.serving.cpu_inference.for_cpu_inference` (`cpu_inference_fp32`: the
same decoder, its Linear layers through oneDNN, freed memory kept) or with int8 Linear layers (`cpu_inference_int8`);
Marian (presets only); and CTranslate2 running this model's export (`ct2_fp32`, `ct2_int8`,
`vaswani.serving.ctranslate2_export`), in process and alone in a fresh process (`*_alone`: CTranslate2,
`cpu_inference_fp32` and `default_pipeline`, the pipeline in a process that cannot import this package, so that the
headline ratios, `cpu_inference_fp32_alone_vs_ct2_fp32_alone` and `default_pipeline_alone_vs_ct2_fp32_alone`, compare
processes timed alike, in pairs). The rest in one process, alternating round after round, at each thread count, greedy
and beam-4, on each of `--workloads`: a preset with random weights (every engine forced to `--new-tokens` new tokens),
or a shipped model, results/NAME/model, on the first `--batch-size` (default 64) inputs of its held-out data in one
padded batch, decoded up to its generation config's max_new_tokens with its length penalty (and n-gram rule). Beam
search stops as CTranslate2's does (`early_stopping=True`: an input is over once num_beams hypotheses have finished),
so that every engine computes the same tokens; the shipped configs' rule (`early_stopping=False`, a longer search
CTranslate2 cannot run) is timed beside, in process (`cpu_inference_fp32_early_stopping_false`). Each row gives the
milliseconds per batch, the generated tokens per second (the tokens the plain model generates), the ratios to
CTranslate2 fp32, whether `cpu_inference_fp32`, `default_generate` and CTranslate2 fp32 gave the tokens of
transformers' loop (and `default_pipeline` their text), and the load average before and after (a loaded machine's
numbers are noise). With --profile, each row also says where one call of `cpu_inference_fp32` and of
`cpu_inference_int8` spends its time (`*_shares`: the layers' products, attention, the search's operators, the other
operators, and the Python and dispatch around them). The table of results/benchmark/README.md comes from:

    python scripts/tools/benchmark.py --engines --threads 1 2 --rounds 5 --alone_pairs 5 \\
        --workloads base multi30k_en_de multi30k_de_en samsum --data_dir ../shared/data \\
        --json results/benchmark/engines_cpu_amd_epyc_zen5_2026-11-28_cache.json
"""

import argparse

from vaswani.cli import run_command
from vaswani_tools.benchmarking import REPO, WORKLOADS, run_benchmark


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
        "kernels and the rest, and the ceiling on the ratio that the shared kernels allow; with --engines, one call "
        "of each CPU inference engine, by operator group",
    )
    parser.add_argument("--engines", action="store_true",
                        help="time generation in every engine instead (CPU; needs the ctranslate2 extra)")
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2], help="with --engines: the thread counts")
    parser.add_argument("--alone_pairs", type=int, default=3,
                        help="with --engines: rounds of fresh processes timing cpu_inference_fp32, default_pipeline, "
                        "CTranslate2 fp32, cpu_inference_int8 and CTranslate2 int8 alone")
    parser.add_argument(
        "--workloads", nargs="+", default=["base"], choices=WORKLOADS,
        help="with --engines: presets (random weights and inputs) and shipped models (results/NAME/model on its "
        "held-out data)",
    )
    parser.add_argument("--data_dir", default=str(REPO.parent / "shared" / "data"),
                        help="with --engines: the datasets folder the shipped workloads read")
    parser.add_argument("--corpus", action="store_true",
                        help="time the corpus workload instead: a file translated by scripts/predict.py, CTranslate2's "
                        "translate_iterable and the pipeline (vaswani_tools.corpus_benchmark)")
    parser.add_argument("--corpus_lines", type=int, default=10_000, help="with --corpus: the corpus's lines")
    parser.add_argument("--corpus_beams", nargs="+", type=int, default=[5, 1], help="with --corpus: the beam counts")
    parser.add_argument("--corpus_ct2_batch_sizes", nargs="+", type=int, default=[32],
                        help="with --corpus: CTranslate2's max_batch_size, one engine each")
    parser.add_argument("--corpus_predict_batch_sizes", nargs="+", type=int, default=[],
                        help="with --corpus: predict.py's --batch_size, one more engine each")
    parser.add_argument("--corpus_no_pipeline", action="store_true", help="with --corpus: leave the pipeline out")
    parser.add_argument("--memory_lines", nargs="+", type=int,
                        help="time instead scripts/predict.py's peak memory over corpora of these sizes (short lines)")
    parser.add_argument("--json", help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.engines and any(count < 1 for count in args.threads):
        parser.error(f"--threads must be 1 or more, got {args.threads}")
    if args.alone_pairs < 1:
        parser.error(f"--alone_pairs must be 1 or more, got {args.alone_pairs}")
    return run_benchmark(args)


if __name__ == "__main__":
    run_command(main)  # a bad --json (a device, a folder) is one line, before the measurements
