"""Tokenized, lowercased BLEU, as papers report it on Multi30k (multi-bleu over Moses-tokenized text).

Hypotheses and references go through the same steps as the dataset's own tokenized files (`*.lc.norm.tok.*`):
lowercase, Moses punctuation normalization, Moses tokenization with its default escaping; BLEU is then counted on
those tokens as they are (sacreBLEU with tokenize="none"). Applied to Multi30k's raw test references, these steps
reproduce its tokenized references exactly. Not comparable with sacreBLEU: report both, each with its signature.
"""

import datasets
import evaluate
import sacrebleu
from sacremoses import MosesPunctNormalizer, MosesTokenizer


_CITATION = """@inproceedings{papineni-etal-2002-bleu,
  title = "{B}leu: a Method for Automatic Evaluation of Machine Translation",
  author = "Papineni, Kishore and Roukos, Salim and Ward, Todd and Zhu, Wei-Jing", booktitle = "ACL", year = "2002"}"""

_DESCRIPTION = "BLEU on lowercased, punctuation-normalized, Moses-tokenized text (the convention of papers)."

_KWARGS = """
Args:
    predictions: list of detokenized hypotheses.
    references: one reference per prediction (or a list of references per prediction).
    lang: language code for Moses' normalizer and tokenizer (the target language), e.g. "de" or "en".
    lowercase: lowercase before tokenizing (default True, as in the papers).
    references_tokenized: the references are already tokenized (e.g. Multi30k's tok/ files): leave them as they are.
Returns:
    score (0-100), precisions, bp, sys_len, ref_len, signature.
"""


@evaluate.utils.file_utils.add_start_docstrings(_DESCRIPTION, _KWARGS)
class TokenizedBleu(evaluate.Metric):
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
        )

    def compute(self, *, predictions=None, references=None, **kwargs):
        """Score `predictions` against `references`."""
        # evaluate cannot tell which input format an empty list has, and fails obscurely; say what is wrong instead
        if predictions is not None and len(predictions) == 0:
            raise ValueError("There are no predictions to score: the evaluation set is empty.")
        return super().compute(predictions=predictions, references=references, **kwargs)

    def _compute(self, predictions, references, lang="en", lowercase=True, references_tokenized=False):
        if not predictions:
            raise ValueError("BLEU needs at least one prediction; the evaluation set is empty.")
        prepare = MosesPreprocessor(lang, lowercase)
        hypotheses = [prepare(p) for p in predictions]
        references = [[r] if isinstance(r, str) else list(r) for r in references]
        if not references_tokenized:
            references = [[prepare(r) for r in refs] for refs in references]
        streams = [list(stream) for stream in zip(*references)]
        bleu = sacrebleu.BLEU(tokenize="none", force=True)
        result = bleu.corpus_score(hypotheses, streams)
        steps = ("lc+" if lowercase else "") + f"moses-norm+moses-tok:{lang}"
        return {
            "score": result.score,
            "precisions": result.precisions,
            "bp": result.bp,
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
            "signature": f"{bleu.get_signature()}|pretok:{steps}",
        }


class MosesPreprocessor:
    """lowercase -> normalize-punctuation.perl -> tokenizer.perl (escaping on), in sacremoses' implementation."""

    def __init__(self, lang: str, lowercase: bool):
        self.normalizer = MosesPunctNormalizer(lang=lang)
        self.tokenizer = MosesTokenizer(lang=lang)
        self.lowercase = lowercase

    def __call__(self, text: str) -> str:
        text = text.lower() if self.lowercase else text
        return self.tokenizer.tokenize(self.normalizer.normalize(text), escape=True, return_str=True)
