"""Tokenized BLEU, as papers report it (multi-bleu over Moses-tokenized text).

By default as on Multi30k: hypotheses and references go through the same steps as the dataset's own tokenized files
(`*.lc.norm.tok.*`): lowercase, Moses punctuation normalization, Moses tokenization with its default escaping; BLEU is
then counted on those tokens as they are (sacreBLEU with tokenize="none"). Applied to Multi30k's raw test references,
these steps reproduce its tokenized references exactly.

With `lowercase=False, normalize=False, compound_split=True`, as WMT14 English-German is scored since GNMT and in
*Attention Is All You Need* (tensor2tensor's get_ende_bleu.sh): cased text, Moses tokenization, then every hyphen
between two non-space characters split off as `##AT##-##AT##` ("rich-text" -> "rich ##AT##-##AT## text"), in the
hypotheses and the references alike (`split_compounds`). Not comparable with sacreBLEU: report both, each with its
signature.
"""

import re

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
    lowercase: lowercase before tokenizing (default True, as the Multi30k papers).
    normalize: Moses punctuation normalization before tokenizing (default True, as Multi30k's tokenized files).
    compound_split: split hyphenated compounds after tokenizing, "a-b" -> "a ##AT##-##AT## b" (default False; True, with
        lowercase=False and normalize=False, as WMT14 en-de is scored).
    references_tokenized: the references are already tokenized (e.g. Multi30k's tok/ files): leave them as they are
        (compounds are still split with compound_split).
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

    def _compute(self, predictions, references, lang="en", lowercase=True, references_tokenized=False, normalize=True,
                 compound_split=False):
        if not predictions:
            raise ValueError("BLEU needs at least one prediction; the evaluation set is empty.")
        prepare = MosesPreprocessor(lang, lowercase, normalize)
        finish = split_compounds if compound_split else (lambda text: text)
        hypotheses = [finish(prepare(p)) for p in predictions]
        references = [[r] if isinstance(r, str) else list(r) for r in references]
        if not references_tokenized:
            references = [[prepare(r) for r in refs] for refs in references]
        references = [[finish(r) for r in refs] for refs in references]
        streams = [list(stream) for stream in zip(*references)]
        bleu = sacrebleu.BLEU(tokenize="none", force=True)
        result = bleu.corpus_score(hypotheses, streams)
        steps = (("lc+" if lowercase else "") + ("moses-norm+" if normalize else "") + f"moses-tok:{lang}"
                 + ("+compound-split" if compound_split else ""))
        return {
            "score": result.score,
            "precisions": result.precisions,
            "bp": result.bp,
            "sys_len": result.sys_len,
            "ref_len": result.ref_len,
            "signature": f"{bleu.get_signature()}|pretok:{steps}",
        }


class MosesPreprocessor:
    """lowercase -> normalize-punctuation.perl -> tokenizer.perl (escaping on), in sacremoses' implementation; the
    first two steps each optional."""

    def __init__(self, lang: str, lowercase: bool, normalize: bool = True):
        self.normalizer = MosesPunctNormalizer(lang=lang) if normalize else None
        self.tokenizer = MosesTokenizer(lang=lang)
        self.lowercase = lowercase

    def __call__(self, text: str) -> str:
        text = text.lower() if self.lowercase else text
        text = self.normalizer.normalize(text) if self.normalizer is not None else text
        return self.tokenizer.tokenize(text, escape=True, return_str=True)


# a hyphen between two characters that are not spaces, each kept beside it
_COMPOUND_HYPHEN = re.compile(r"(\S)-(\S)")


def split_compounds(text: str) -> str:
    """Tokenized text with each hyphen inside a word split off as the token `##AT##-##AT##`: "rich-text format" ->
    "rich ##AT##-##AT## text format". The matches are found left to right without overlapping, each taking the
    characters on both sides of its hyphen: in "Vitamin-B-Mangel" the second hyphen's left character is the first
    match's, and it stays: "Vitamin ##AT##-##AT## B-Mangel", as the substitution of get_ende_bleu.sh splits it
    ("Nord-Süd-Verbindung", whose middle part is longer, is split twice); a hyphen with a space beside it stays."""
    return _COMPOUND_HYPHEN.sub(r"\1 ##AT##-##AT## \2", text)
