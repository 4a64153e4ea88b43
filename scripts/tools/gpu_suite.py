"""One GPU measured by one command in at most 10 minutes: training speed (MFU) at the paper's shapes, the Multi30k
en->de recipe on a clock, generation against CTranslate2, and the DeepSpeed and FSDP engines really engaged.

    python scripts/tools/gpu_suite.py --output_dir results/benchmark               # on the GPU
    python scripts/tools/gpu_suite.py --only recipe --output_dir results/benchmark # rerun one part
    python scripts/tools/gpu_suite.py --dry_run --output_dir /tmp/suite            # the same code on the CPU, tiny

Four parts, in this order, each in processes of its own with a time limit of its own (SIZES below), within the
suite's 590 s (a part gets what is left; one with under 30 s left is not started, and the JSON says so), so that one
that fails or runs over still leaves the others' results, and its error, in the JSON:

  training  one process (`--worker training`): the base and big presets, bf16, each update one micro-batch of about
            25,000 target tokens (and as many source tokens), the paper's shared vocabulary of 37,000 pieces,
            through the real training update of scripts/train.py
            (`vaswani.training.update.run_update`, under an Accelerator with bf16 mixed precision, the optimizer and
            schedule of `vaswani.training.optimization`), eager and `torch.compile`d, beside transformers' Marian of
            the same architecture in the same update (eager); first, the Multi30k GPU recipe's own model on its
            4,080-token update, fp32, eager, and last the updates replayed from CUDA graphs: the recipe's (train.py
            --cuda_graphs), then the base preset's compiled, its optimizer step in the graphs (train.py
            --cuda_graphs --torch_compile; the dry run stands in with the work itself). MFU against the bf16
            matrix-multiply peak measured first in the same process (`vaswani_tools.benchmarking`, shared with
            scripts/tools/benchmark.py). Each row: tokens/s, MFU, the peak memory of tensors and the peak reserved
            from the GPU (which holds the CUDA graphs' pool), and a profile of a few more updates (kernels per
            update, the GPU's busy share, the kernels of most time). Before the rows, the base update's output-layer
            loss alone, full logits against --chunked_loss: milliseconds and peak memory (the JSON's "loss"). From
            the fastest row of each preset, the paper's runs (base 100,000 updates, big 300,000) in hours on 1 GPU
            and, at most 8x faster, on 8 (the JSON's "projection").
  recipe    scripts/train.py with scripts/configs/multi30k_en_de_gpu.yaml as it is (the CPU recipe's 9,000 updates of
            4,096 tokens, from CUDA graphs; the dry run: 2 updates, --cuda_graphs false), then
            scripts/evaluate_model.py on test_2016_flickr: tokenized BLEU, sacreBLEU, and train.py's own training
            time (summary.json's train_seconds: updates only, without data preparation, evaluation and saving).
  generation  one process (`--worker generation`, vaswani_tools.gpu_generation): the shipped en->de model's
            `generate` in bf16 and CTranslate2 in float16 on the same GPU, greedy and beam 4, 2,048 validation
            captions in batches of 64: seconds, tokens/s, and how many captions CTranslate2 decodes to our tokens;
            last, ours with a static cache and the compiled forward in CUDA graphs (`vaswani_compiled`).
  engines   `accelerate launch --config_file scripts/configs/accelerate_{ddp,deepspeed,fsdp}.yaml --num_processes 1
            scripts/train.py` on the synthetic task with the base preset: whether the engine engaged is read from the
            run's own summary.json (`distributed_type`), never assumed; a run that refuses or fails is a row with
            engaged false and its error.

It writes into --output_dir: gpu_suite.json, gpu_suite.md (its tables, for the run's file in results/benchmark/runs/),
gpu_suite.log (every process's output) and the recipe's recipe_training_summary.json and
recipe_evaluation_results.json. Models and checkpoints go to --work_dir (a temporary folder by default), never to
the output folder: a lent GPU machine sends back only a few files. `--only PART` replaces that part in an existing
gpu_suite.json of the same device and keeps the others.

--dry_run runs every part the same way with tiny sizes (the tiny preset, a few updates, ten sentence pairs for the
recipe, six captions decoded on the CPU in float32): tests/tools/test_gpu_suite.py runs it, so that the command
cannot rot between lent GPUs. On a machine without a GPU, DeepSpeed and FSDP cannot engage (train.py refuses them),
which the JSON records as engaged false; DDP runs on CPU processes (ACCELERATE_USE_CPU=1). What differs on a GPU is
in vaswani_tools.gpu_suite's `_on_gpu()` and its callers: the compiler backend (inductor; the CPU dry run only
traces, with the `eager` backend), the engine DDP is expected to be, the captures (a stand-in on a CPU), and peak
memory (torch.cuda.max_memory_allocated and max_memory_reserved; none on a CPU).
"""

import argparse
from pathlib import Path

from vaswani.cli import run_command
from vaswani_tools.gpu_suite import PARTS, run_suite


REPO = Path(__file__).resolve().parents[2]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output_dir", default=str(REPO / "results" / "benchmark"),
                        help="where gpu_suite.json, gpu_suite.md, gpu_suite.log and the recipe's files go")
    parser.add_argument("--only", choices=PARTS, help="run this part only; the others stay as they are in the JSON")
    parser.add_argument("--seconds", type=int, help="with --only: the part's time limit in seconds, in place of its "
                        "own (e.g. a recipe config of more updates)")
    parser.add_argument("--dry_run", action="store_true", help="every part with tiny sizes (on a CPU: seconds)")
    parser.add_argument("--multi30k_dir", default=str(REPO.parent / "shared" / "data" / "multi30k"),
                        help="the folder of train.jsonl, validation.jsonl and test_2016_flickr.jsonl (on the lent "
                        "machine: .data/multi30k, which scripts/tools/gather_gpu_wheels.py fills)")
    parser.add_argument("--work_dir", help="where the runs write their models and checkpoints (default: a "
                        "temporary folder, removed at the end)")
    parser.add_argument("--train_py_compile", choices=["yes", "no"], default="no",
                        help="pass --torch_compile to the recipe's train.py (the engine runs stay eager); no by "
                        "default: on an H100 inductor took 39 s, then 77 s for the dynamic graph, of the recipe's "
                        "three minutes")
    parser.add_argument("--worker", choices=["training", "generation"], help=argparse.SUPPRESS)
    return run_suite(parser.parse_args(argv), REPO)


if __name__ == "__main__":
    run_command(main)
