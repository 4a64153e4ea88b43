"""A few-seconds tour on CPU: train a tokenizer, build a tiny Transformer, fit a handful of sentence pairs, generate.

    python scripts/demo_from_scratch.py
"""

import argparse
import tempfile

import torch

from vaswani import VaswaniConfig, VaswaniForConditionalGeneration, VaswaniTokenizer
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

PAIRS = [
    ("A man is riding a horse.", "Ein Mann reitet ein Pferd."),
    ("Two dogs play in the snow.", "Zwei Hunde spielen im Schnee."),
    ("A girl is reading a book.", "Ein Mädchen liest ein Buch."),
    ("The children are playing football.", "Die Kinder spielen Fußball."),
    ("A woman is drinking coffee.", "Eine Frau trinkt Kaffee."),
    ("Two men are walking on the street.", "Zwei Männer gehen auf der Straße."),
]


def main(steps: int = 150, seed: int = 0) -> list[str]:
    torch.manual_seed(seed)
    tokenizer = VaswaniTokenizer.train_from_texts([text for pair in PAIRS for text in pair], vocab_size=400, min_frequency=1)
    config = VaswaniConfig.from_preset("tiny", vocab_size=len(tokenizer), dropout=0.0, d_model=64, encoder_ffn_dim=128, decoder_ffn_dim=128)
    model = VaswaniForConditionalGeneration(config)
    print(f"Built a {model.num_parameters():,}-parameter encoder-decoder ({config.encoder_layers}+{config.decoder_layers} layers, d_model={config.d_model}).")

    sources, targets = zip(*PAIRS)
    batch = tokenizer(list(sources), text_target=list(targets), padding=True, return_tensors="pt")
    batch["labels"] = batch["labels"].masked_fill(batch["labels"] == tokenizer.pad_token_id, -100)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    model.train()
    for step in range(1, steps + 1):
        loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        if step % 50 == 0 or step == 1:
            print(f"step {step:4d}  loss {loss.item():.3f}")

    # save and reload through the Auto classes, as a user of the model would
    model.eval()
    with tempfile.TemporaryDirectory() as folder:
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder)
        tokenizer = AutoTokenizer.from_pretrained(folder)

    inputs = tokenizer(list(sources[:3]), padding=True, return_tensors="pt")
    greedy = tokenizer.batch_decode(model.generate(**inputs, max_new_tokens=16), skip_special_tokens=True)
    beam = tokenizer.batch_decode(model.generate(**inputs, max_new_tokens=16, num_beams=4), skip_special_tokens=True)
    for source, g, b in zip(sources, greedy, beam):
        print(f"{source!r}\n  greedy: {g!r}\n  beam-4: {b!r}")
    return greedy


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    main(args.steps, args.seed)
