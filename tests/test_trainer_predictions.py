"""The Trainer's predictions of the classifiers are their logits alone (the config's `keys_to_ignore_at_inference`),
so that transformers' run_glue / run_ner compute their metrics from them (`np.argmax(predictions, axis=-1)`)."""

import numpy as np
import pytest
import torch
from transformers import Trainer, TrainingArguments

from helpers import PAIRS, tiny_config
from vaswani import VaswaniForSequenceClassification, VaswaniForTokenClassification


class Rows(torch.utils.data.Dataset):
    def __init__(self, rows: list[dict]):
        self.rows = rows

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, index):
        return self.rows[index]


def encoded_rows(tokenizer, token_labels: bool) -> Rows:
    texts = [source for source, _ in PAIRS[:5]]
    rows = []
    for index, text in enumerate(texts):
        ids = tokenizer(text, padding="max_length", max_length=16, truncation=True)
        label = [index % 3] * 16 if token_labels else index % 3
        rows.append({"input_ids": ids["input_ids"], "attention_mask": ids["attention_mask"], "labels": label})
    return Rows(rows)


@pytest.mark.parametrize(
    "model_class, token_labels, encoder_decoder",
    [
        (VaswaniForSequenceClassification, False, True),  # BART-like: the output also holds the encoder's states
        (VaswaniForSequenceClassification, False, False),
        (VaswaniForTokenClassification, True, False),
    ],
    ids=["sequence-encoder-decoder", "sequence-encoder-only", "token"],
)
def test_trainer_predict_gives_the_logits_alone(tokenizer, tmp_path, model_class, token_labels, encoder_decoder):
    torch.manual_seed(0)
    model = model_class(tiny_config(vocab_size=len(tokenizer), num_labels=3, is_encoder_decoder=encoder_decoder))
    rows = encoded_rows(tokenizer, token_labels)
    arguments = TrainingArguments(output_dir=str(tmp_path), per_device_eval_batch_size=2, report_to="none",
                                  use_cpu=True, disable_tqdm=True, dataloader_pin_memory=False)
    predictions = Trainer(model=model, args=arguments).predict(rows)
    assert isinstance(predictions.predictions, np.ndarray)  # not a tuple of logits and encoder states
    expected_shape = (len(rows), 16, 3) if token_labels else (len(rows), 3)
    assert predictions.predictions.shape == expected_shape
    model.eval()
    with torch.no_grad():
        first = model(**{key: torch.tensor([value]) for key, value in rows[0].items() if key != "labels"}).logits
    np.testing.assert_allclose(predictions.predictions[0], first[0].numpy(), rtol=1e-5, atol=1e-6)
    # run_glue's metric step
    assert np.argmax(predictions.predictions, axis=-1).shape == expected_shape[:-1]
