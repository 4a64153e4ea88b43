"""sacreBLEU (Post, 2018): corpus BLEU on detokenized text, with the signature that makes scores comparable."""

import datasets
import evaluate
import sacrebleu


_CITATION = """@inproceedings{post-2018-call,
  title = "A Call for Clarity in Reporting {BLEU} Scores", author = "Post, Matt",
  booktitle = "Proceedings of the Third Conference on Machine Translation", year = "2018", pages = "186--191"}"""

_DESCRIPTION = "Corpus BLEU computed by sacreBLEU on detokenized text; `signature` records every setting."

_KWARGS = """
Args:
    predictions: list of detokenized hypotheses.
    references: one reference string per prediction, or a list of references per prediction (same count for all).
    tokenize: sacreBLEU tokenizer ("13a" by default; "intl", "char", "none", ...).
    lowercase: score case-insensitively.
Returns:
    score (0-100), counts, totals, precisions, bp, sys_len, ref_len, signature.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS)
class Sacrebleu(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description=_DESCRIPTION,
            citation=_CITATION,
            inputs_description=_KWARGS,
            features=[
                datasets.Features(
                    {"predictions": datasets.Value("string"), "references": datasets.Sequence(datasets.Value("string"))}
                ),
                datasets.Features({"predictions": datasets.Value("string"), "references": datasets.Value("string")}),
            ],
            reference_urls=["https://github.com/mjpost/sacrebleu"],
        )

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Score `predictions` against `references`."""
        # evaluate cannot tell which input format an empty list has, and fails obscurely; say what is wrong instead
        if predictions is not None and len(predictions) == 0:
            raise ValueError("There are no predictions to score: the evaluation set is empty.")
        return super().compute(predictions=predictions, references=references, **kwargs)

    def _compute(self, predictions, references, tokenize="13a", lowercase=False):
        return corpus_bleu(predictions, references, tokenize=tokenize, lowercase=lowercase)


def corpus_bleu(predictions, references, tokenize, lowercase):
    if not predictions:
        raise ValueError("BLEU needs at least one prediction; the evaluation set is empty.")
    references = [[r] if isinstance(r, str) else list(r) for r in references]
    counts = {len(r) for r in references}
    if len(counts) != 1:
        raise ValueError(f"Every prediction needs the same number of references; got counts {sorted(counts)}.")
    streams = [list(stream) for stream in zip(*references)]  # sacreBLEU takes one stream per reference position
    bleu = sacrebleu.BLEU(tokenize=tokenize, lowercase=lowercase, force=tokenize == "none")
    result = bleu.corpus_score(list(predictions), streams)
    return {
        "score": result.score,
        "counts": result.counts,
        "totals": result.totals,
        "precisions": result.precisions,
        "bp": result.bp,
        "sys_len": result.sys_len,
        "ref_len": result.ref_len,
        "signature": str(bleu.get_signature()),
    }
