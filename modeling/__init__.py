"""The original Transformer ("Attention Is All You Need") as a Hugging Face model.

Importing this package registers the config, the models and the tokenizer with transformers' Auto classes, and
marks them so that every saved model carries its code and loads with `trust_remote_code=True` elsewhere.
"""

import transformers
from transformers import AutoConfig, AutoTokenizer

from .remote_code.configuration_vaswani import PRESETS, VaswaniConfig
from .remote_code.modeling_vaswani import (
    VaswaniEncoderModel,
    VaswaniForConditionalGeneration,
    VaswaniForSequenceClassification,
    VaswaniForTokenClassification,
    VaswaniModel,
    VaswaniPreTrainedModel,
)
from .remote_code.tokenization_vaswani import VaswaniTokenizer
from .tasks import EVERY_TASK


__version__ = "0.1.0"

# each task's Auto class loads its model class (vaswani.tasks), and AutoModel the bare encoder-decoder
_MODELS = {model.__name__: model for model in (VaswaniModel, VaswaniForConditionalGeneration,
                                               VaswaniForSequenceClassification, VaswaniForTokenClassification)}
_AUTO_CLASSES = {getattr(transformers, task.auto_class): _MODELS[task.architecture]
                 for task in EVERY_TASK}

AutoConfig.register(VaswaniConfig.model_type, VaswaniConfig, exist_ok=True)
AutoTokenizer.register(VaswaniConfig, fast_tokenizer_class=VaswaniTokenizer, exist_ok=True)
for _auto_class, _model_class in _AUTO_CLASSES.items():
    _auto_class.register(VaswaniConfig, _model_class, exist_ok=True)
    _model_class.register_for_auto_class(_auto_class.__name__)
VaswaniConfig.register_for_auto_class()
VaswaniTokenizer.register_for_auto_class()

__all__ = [
    "PRESETS",
    "VaswaniConfig",
    "VaswaniEncoderModel",
    "VaswaniForConditionalGeneration",
    "VaswaniForSequenceClassification",
    "VaswaniForTokenClassification",
    "VaswaniModel",
    "VaswaniPreTrainedModel",
    "VaswaniTokenizer",
]
