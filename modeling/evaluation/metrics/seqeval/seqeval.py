"""Entity-level precision, recall and F1 for BIO/IOB tagging, as conlleval (and seqeval's default mode) count them.

An entity is a maximal run of tokens of one type: it starts at a B- tag, or at an I- tag that does not continue an
entity of its type (conlleval's lenient reading of IOB1 and broken IOB2), and it counts as correct only when the
predicted entity has exactly the same type, start and end.
"""

from collections import Counter

import datasets
import evaluate


_CITATION = """@inproceedings{tjong-kim-sang-de-meulder-2003-introduction,
  title = "Introduction to the {C}o{NLL}-2003 Shared Task: Language-Independent Named Entity Recognition",
  author = "Tjong Kim Sang, Erik F. and De Meulder, Fien", booktitle = "CoNLL", year = "2003"}"""

_KWARGS = """
Args:
    predictions: list of tag sequences (e.g. [["B-PER", "I-PER", "O"], ...]).
    references: list of tag sequences of the same lengths.
Returns:
    overall_precision, overall_recall, overall_f1, overall_accuracy (token level), all in 0-1, and for each entity
    type a dict with precision, recall, f1 and number (its count in the references).
"""


class Seqeval(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Entity-level F1 for sequence tagging (conlleval / seqeval default mode).",
            citation=_CITATION,
            inputs_description=_KWARGS,
            features=datasets.Features(
                {
                    "predictions": datasets.Sequence(datasets.Value("string")),
                    "references": datasets.Sequence(datasets.Value("string")),
                }
            ),
        )

    def _compute(self, predictions, references):
        if not predictions:
            raise ValueError("Entity F1 needs at least one sequence; the evaluation set is empty.")
        found, expected, correct = Counter(), Counter(), Counter()
        tokens = right = 0
        for index, (predicted, reference) in enumerate(zip(predictions, references)):
            if len(predicted) != len(reference):
                raise ValueError(
                    f"Sequence {index}: {len(predicted)} predicted tags for {len(reference)} reference tags."
                )
            predicted_entities, reference_entities = set(entities(predicted)), set(entities(reference))
            found.update(kind for kind, _, _ in predicted_entities)
            expected.update(kind for kind, _, _ in reference_entities)
            correct.update(kind for kind, _, _ in predicted_entities & reference_entities)
            tokens += len(reference)
            right += sum(p == r for p, r in zip(predicted, reference))
        result = {}
        for kind in sorted(set(found) | set(expected)):
            precision, recall, f1 = scores(correct[kind], found[kind], expected[kind])
            result[kind] = {"precision": precision, "recall": recall, "f1": f1, "number": expected[kind]}
        precision, recall, f1 = scores(sum(correct.values()), sum(found.values()), sum(expected.values()))
        result.update(
            overall_precision=precision, overall_recall=recall, overall_f1=f1,
            overall_accuracy=right / tokens if tokens else 0.0,
        )
        return result


def entities(tags):
    """(type, start, end) of each entity in a BIO/IOB tag sequence; `end` is exclusive."""
    spans, kind, start = [], None, 0
    for position, tag in enumerate(list(tags) + ["O"]):
        prefix, _, tag_kind = tag.partition("-")
        continues = prefix == "I" and tag_kind == kind
        if kind is not None and not continues:
            spans.append((kind, start, position))
            kind = None
        if prefix in ("B", "I") and not continues:
            kind, start = tag_kind, position
    return spans


def scores(correct: int, found: int, expected: int):
    precision = correct / found if found else 0.0
    recall = correct / expected if expected else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return precision, recall, f1
