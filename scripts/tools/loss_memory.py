"""Peak memory of the output layer's loss on a CPU: the full logits (the model's forward) against --chunked_loss.

    python scripts/tools/loss_memory.py                                  # 4,096 tokens, vocabulary 32,000, d_model 512
    python scripts/tools/loss_memory.py --tokens 2048 8192 --precisions fp32 bf16 --json loss_memory.json

Each measurement runs in a fresh process of its own (a process's high-water mark never goes down): hidden states of
(tokens x d_model) and a projection of (vocabulary x d_model) are made, then the loss and its gradients with respect
to both, either as the model computes them (`full`: the logits of every token in the projection's precision,
float32 cross-entropy with label smoothing 0.1 over them, and autograd's backward) or by
`vaswani.training.chunked_loss.linear_cross_entropy` (`chunked`). The number is the growth of the process's peak
resident memory (the kernel's high-water mark, `ru_maxrss`) over its resident memory before the loss: what the loss
and its gradients needed at their peak, the inputs, weights and the interpreter left out; beside it, the seconds the
loss and its backward took, once, on one thread (a loaded machine's seconds are noise). The processes run with
glibc's mmap threshold fixed at 128 KiB (MALLOC_MMAP_THRESHOLD_, MALLOC_TRIM_THRESHOLD_): every tensor's memory then
goes back to the kernel when it is freed, and the peak is that of the tensors alive at once. (With glibc's default,
a threshold that rises with the blocks freed, the same chunked run measured 172 MiB or 684 to 972 MiB from one
process to the next: blocks kept by the allocator, not tensors.)
"""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

MEASURE = """
import resource, sys, time, torch
import torch.nn.functional as F
from vaswani.training.chunked_loss import linear_cross_entropy
tokens, vocabulary, d_model, way, precision = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4], sys.argv[5]
torch.manual_seed(0)
dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[precision]
hidden = torch.randn(tokens, d_model).requires_grad_()
weight = (torch.randn(vocabulary, d_model) * 0.05).requires_grad_()
labels = torch.randint(0, vocabulary, (tokens,))
def resident():
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()
before = resident()
started = time.perf_counter()
if way == "full":
    loss = F.cross_entropy((hidden.to(dtype) @ weight.to(dtype).T).float(), labels, label_smoothing=0.1)
else:
    loss = linear_cross_entropy(hidden, weight, labels, 0.1, compute_dtype=dtype)
loss.backward()
seconds = time.perf_counter() - started
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
print(max(peak - before, 0), float(loss), seconds)
"""


FIXED_ALLOCATOR = {"MALLOC_MMAP_THRESHOLD_": "131072", "MALLOC_TRIM_THRESHOLD_": "131072"}


def measure(tokens: int, vocabulary: int, d_model: int, way: str, precision: str) -> dict:
    done = subprocess.run([sys.executable, "-c", MEASURE, str(tokens), str(vocabulary), str(d_model), way, precision],
                          capture_output=True, text=True, check=True, env={**os.environ, "OMP_NUM_THREADS": "1",
                                                                           **FIXED_ALLOCATOR})
    grown, loss, seconds = done.stdout.split()
    return {"tokens": tokens, "vocabulary": vocabulary, "d_model": d_model, "precision": precision, "way": way,
            "peak_mib": int(grown) / 2**20, "loss": float(loss), "seconds": float(seconds),
            "logits_mib": tokens * vocabulary * 4 / 2**20}  # one float32 copy of the logits, for scale


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[4096])
    parser.add_argument("--vocab_size", type=int, default=32000)
    parser.add_argument("--d_model", type=int, default=512)
    parser.add_argument("--precisions", nargs="+", choices=["fp32", "bf16"], default=["fp32"])
    parser.add_argument("--json", help="also write the rows to this file")
    args = parser.parse_args(argv)
    rows = []
    print("| tokens | vocabulary | d_model | precision | loss computed | loss | peak memory (MiB) | one float32 copy of "
          "the logits (MiB) | seconds (one thread, once) |\n|---|---|---|---|---|---|---|---|---|")
    for tokens in args.tokens:
        for precision in args.precisions:
            for way in ("full", "chunked"):
                row = measure(tokens, args.vocab_size, args.d_model, way, precision)
                rows.append(row)
                print(f"| {tokens:,} | {args.vocab_size:,} | {args.d_model} | {precision} | {way} | {row['loss']:.5f} "
                      f"| {row['peak_mib']:,.0f} | {row['logits_mib']:,.0f} | {row['seconds']:.2f} |", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
