"""The model of a fine-tuning or evaluation run: a task head loaded from a saved model (whose shared weights are
reused) or built from scratch from a preset, with a plain-words report of which heads are new.

A model of another kind than the task's head is fine for fine-tuning: a seq2seq model given to token
classification loads its shared embedding and encoder, and the report names the new `classifier` and the unused
decoder. For evaluation it is not: a head that was never trained would be scored, so
`vaswani.safe_loading.require_trained_head` refuses.
"""

import logging
from dataclasses import asdict, dataclass, field

from transformers import AutoConfig, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..cli import parse_config_overrides
from ..code_references import keep_own_code_references, keep_own_tokenizer_code_references
from ..remote_code.configuration_vaswani import PRESETS, VaswaniConfig
from ..data.label_sets import LabelSet, resolve_label_set
from ..data.splits import Splits
from ..remote_code.vocabulary import check_vocabulary
from ..safe_loading import check_model_folder, module_names
from ..remote_code.tokenization_vaswani import VaswaniTokenizer


logger = logging.getLogger(__name__)


@dataclass
class ModelArguments:
    """Where the model of a fine-tuning run comes from: a saved model, or a preset trained from scratch."""

    model_name_or_path: str | None = field(
        default=None,
        metadata={"help": "Model (folder or Hub id) to start from: its weights are reused, new heads reported."},
    )
    preset: str | None = field(
        default=None, metadata={"help": "Train from scratch instead: a VaswaniConfig preset (tiny, small, base, big)."}
    )
    tokenizer_name: str | None = field(
        default=None, metadata={"help": "Tokenizer folder or Hub id; defaults to --model_name_or_path."}
    )
    config_overrides: str | None = field(
        default=None, metadata={"help": "Config fields to change, e.g. 'dropout=0.2,classifier_dropout=0.1'."}
    )
    trust_remote_code: bool = field(
        default=False, metadata={"help": "Allow a model's own code (for models of other projects)."}
    )


@dataclass
class LoadingReport:
    """What loading a saved model into a model class did, by module."""

    source: str  # the folder or Hub id
    model_class: str
    reused: int  # weight tensors taken from the saved model
    new: list[str] = field(default_factory=list)  # modules initialized at random
    unused: list[str] = field(default_factory=list)  # modules of the saved model this model has no use for

    def describe(self) -> str:
        text = f"Loaded {self.source} into {self.model_class}: {self.reused} weight tensors reused."
        if self.new:
            text += f" New, randomly initialized (trained by this run): {', '.join(self.new)}."
        if self.unused:
            text += f" In the saved model but not used by this one: {', '.join(self.unused)}."
        return text

    def as_dict(self) -> dict:
        return asdict(self)


def load_head(
    auto_class, model_args: ModelArguments, tokenizer: PreTrainedTokenizerBase, **config_kwargs
) -> tuple[PreTrainedModel, LoadingReport | None]:
    """The model `auto_class` (e.g. `AutoModelForTokenClassification`) from `--model_name_or_path`, or from scratch
    with a `VaswaniConfig` preset sized to `tokenizer`. `config_kwargs` (labels, for instance) go to the config."""
    source, preset = model_args.model_name_or_path, model_args.preset
    if (source is None) == (preset is None):
        raise ValueError(
            "Give exactly one of --model_name_or_path (start from a saved model) or --preset (train from scratch: "
            f"one of {sorted(PRESETS)}); got model_name_or_path={source!r}, preset={preset!r}."
        )
    overrides = {**parse_config_overrides(model_args.config_overrides), **config_kwargs}
    if preset is not None:
        config = VaswaniConfig.from_preset(
            preset,
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            bos_token_id=tokenizer.bos_token_id,
            eos_token_id=tokenizer.eos_token_id,
            decoder_start_token_id=tokenizer.bos_token_id,
            **overrides,
        )
        model, report = auto_class.from_config(config), None
    else:
        check_model_folder(source)
        model, info = auto_class.from_pretrained(
            source, trust_remote_code=model_args.trust_remote_code, output_loading_info=True, **overrides
        )
        report = LoadingReport(
            source=str(source),
            model_class=type(model).__name__,
            reused=len(model.state_dict()) - len(info["missing_keys"]),
            new=module_names(info["missing_keys"]),
            unused=module_names(info["unexpected_keys"]),
        )
        # a new head or an unused part of the model is worth a warning; a complete load is just information
        (logger.warning if report.new or report.unused else logger.info)(report.describe())
        if model.config.model_type == VaswaniConfig.model_type:  # the folders it saves point to this project's code
            keep_own_code_references(model.config, str(source))
    check_vocabulary(model, tokenizer)
    return model, report


def label_names_of_fine_tuned(model_name_or_path: str | None, head_suffix: str, trust_remote_code: bool = False):
    """The label names of a model already fine-tuned with a head whose class name ends in `head_suffix`
    (e.g. "ForTokenClassification"), or None: a seq2seq model's default id2label means nothing."""
    if model_name_or_path is None:
        return None
    check_model_folder(model_name_or_path)
    config = AutoConfig.from_pretrained(model_name_or_path, trust_remote_code=trust_remote_code)
    if not any(name.endswith(head_suffix) for name in config.architectures or []):
        return None
    return [config.id2label[index] for index in sorted(config.id2label)]


def load_tokenizer(model_args: ModelArguments):
    source = model_args.tokenizer_name or model_args.model_name_or_path
    if source is None:
        raise ValueError("Training from scratch (--preset) needs --tokenizer_name: see scripts/train_tokenizer.py.")
    check_model_folder(source)
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=model_args.trust_remote_code)
    if isinstance(tokenizer, VaswaniTokenizer):  # the folders it saves point to this project's code
        keep_own_tokenizer_code_references(tokenizer, str(source))
    return tokenizer


def load_labelled_head(
    auto_class, model_args: ModelArguments, tokenizer, splits: Splits, column: str, label_set: list[str] | None
) -> tuple[LabelSet, PreTrainedModel, LoadingReport | None]:
    """The label set of `column` (see vaswani.data.label_sets) and a classification head (`auto_class`) sized to it."""
    reference, reference_source = splits.reference
    # a model already fine-tuned with this kind of head keeps its label ids
    head_suffix = auto_class.__name__.removeprefix("AutoModel")  # e.g. "ForTokenClassification"
    labels = resolve_label_set(
        reference,
        column,
        reference_source,
        label_set,
        label_names_of_fine_tuned(model_args.model_name_or_path, head_suffix, model_args.trust_remote_code),
    )
    logger.info(labels.describe())
    model, report = load_head(
        auto_class, model_args, tokenizer, num_labels=len(labels), id2label=labels.id2label, label2id=labels.label2id
    )
    return labels, model, report


__all__ = [
    "LoadingReport",
    "ModelArguments",
    "label_names_of_fine_tuned",
    "load_head",
    "load_labelled_head",
    "load_tokenizer",
]
