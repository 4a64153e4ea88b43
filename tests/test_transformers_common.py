"""transformers' own common tests, run against our classes: ModelTesterMixin, ConfigTester, TokenizerTesterMixin.

These are the tests every model inside transformers passes (save/load, attention masks, gradient checkpointing,
resized embeddings, torchscript-free tracing, sdpa against eager, tokenizer round trips...). The mixins are taken at
test time from the sdist of the installed transformers version, which pip downloads once into a cache outside the
repository (`~/.cache/vaswani-tests`, or `$VASWANI_TESTS_CACHE`); they are never copied into this repository. Where
the sdist cannot be had (no package index), the module is skipped with the reason.

The sdist carries the mixins' files but not three of the files they import: `tests/generation/test_utils.py`
(GenerationTesterMixin), `tests/exporters/test_export.py` (ExportTesterMixin, torch.export round trips) and
`tests/utils/test_configuration_utils.py` (the common config keyword arguments); the wheel carries no tests at all.
Point `$VASWANI_TRANSFORMERS_TESTS` at the `tests/` folder of a transformers checkout of the installed version to run
with them; without it, empty stand-ins take their place, and what they leave unrun is one skip per file, saying what
(`test_left_out_by_the_sdist`).

Most of the tests that skip need hardware or libraries absent from a CPU machine (accelerators, Flash Attention,
DeepSpeed, kernels) or are for what this model has not (RoPE, experts, sub-models, a tensor-parallel plan); each
says why. README.md gives the counts, and the command that prints them.

transformers picks labels, and the models some tests apply to, by looking a class's name up in its own Auto mappings,
where ours are absent: the testers below give the labels (`_prepare_for_class`) and list our classes in the mappings
those tests read, as a model inside the library is listed (`setUp`).
"""

import fcntl
import importlib
import os
import subprocess
import sys
import tarfile
import tempfile
import types
import unittest
from pathlib import Path
from unittest.mock import patch

import pytest
import torch
import transformers

from vaswani.remote_code.configuration_vaswani import VaswaniConfig
from vaswani.remote_code.modeling_vaswani import (
    VaswaniForConditionalGeneration,
    VaswaniForSequenceClassification,
    VaswaniForTokenClassification,
    VaswaniModel,
)
from vaswani.remote_code.tokenization_vaswani import VaswaniTokenizer


PACKAGE = "transformers_common_tests"  # the name the sdist's tests/ folder is imported under (no clash with ours)
# Files of transformers' tests/ folder that the mixins import but the sdist leaves out, with what stands in for them.
_STAND_INS = {
    "exporters.test_export": {"ExportTesterMixin": type("ExportTesterMixin", (), {})},
    "generation.test_utils": {"GenerationTesterMixin": type("GenerationTesterMixin", (), {})},
    "utils.test_configuration_utils": {"config_common_kwargs": None},
}
# ... and what does not run while a stand-in takes a file's place
_LEFT_UNRUN = {
    "exporters.test_export": "ExportTesterMixin's torch.export tests",
    "generation.test_utils": "GenerationTesterMixin's generate tests (and ModelTesterMixin's check that the seq2seq "
    "testers take that mixin)",
    "utils.test_configuration_utils": "ConfigTester's check of the common config keyword arguments",
}


def _cache_folder() -> Path:
    return Path(os.environ.get("VASWANI_TESTS_CACHE") or Path.home() / ".cache" / "vaswani-tests")


def _sdist_tests_folder() -> Path:
    """The tests/ folder of the installed transformers version's sdist, downloaded and extracted on first use (by one
    process at a time: the suite's workers collect this module together)."""
    cache = _cache_folder()
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _download_and_extract(cache, transformers.__version__)


def _download_and_extract(cache: Path, version: str) -> Path:
    folder = cache / "x" / f"transformers-{version}" / "tests"
    if (folder / "test_modeling_common.py").is_file():
        return folder
    sdist = cache / f"transformers-{version}.tar.gz"
    if not sdist.is_file():
        command = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                   f"transformers=={version}", "--dest", str(cache)]
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=300)
        except subprocess.TimeoutExpired:
            pytest.skip(f"transformers {version}'s sdist could not be downloaded in 300 s", allow_module_level=True)
        if done.returncode != 0 or not sdist.is_file():
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            pytest.skip(f"transformers {version}'s sdist (its common tests) cannot be had: {last}",
                        allow_module_level=True)
    prefix = f"transformers-{version}/tests/"
    with tarfile.open(sdist) as archive, tempfile.TemporaryDirectory(dir=cache) as staging:
        members = [member for member in archive.getmembers() if member.name.startswith(prefix)]
        archive.extractall(staging, members=members, filter="data")
        folder.parent.mkdir(parents=True, exist_ok=True)
        os.replace(Path(staging) / f"transformers-{version}" / "tests", folder)
    return folder


def _import_common_tests():
    """Import the mixins' modules from transformers' tests/ folder as the package `PACKAGE`."""
    source_tree = os.environ.get("VASWANI_TRANSFORMERS_TESTS")
    folder = Path(source_tree) if source_tree else _sdist_tests_folder()
    # test_configuration_common executes tests/__init__.py (empty in transformers' repository, left out of the sdist)
    if not (folder / "__init__.py").exists():
        (folder / "__init__.py").touch()
    package = types.ModuleType(PACKAGE)
    package.__path__ = [str(folder)]
    sys.modules[PACKAGE] = package
    for dotted, names in _STAND_INS.items():
        if (folder / (dotted.replace(".", "/") + ".py")).is_file():
            continue
        parent = PACKAGE
        for part in dotted.split(".")[:-1]:
            parent = f"{parent}.{part}"
            sys.modules.setdefault(parent, types.ModuleType(parent)).__path__ = []
        module = types.ModuleType(f"{PACKAGE}.{dotted}")
        module.__dict__.update(names, STAND_IN=True)
        sys.modules[module.__name__] = module
    return (
        importlib.import_module(f"{PACKAGE}.test_modeling_common"),
        importlib.import_module(f"{PACKAGE}.test_configuration_common"),
        importlib.import_module(f"{PACKAGE}.test_tokenization_common"),
        importlib.import_module(f"{PACKAGE}.generation.test_utils"),
    )


pytest.importorskip("parameterized", reason="transformers' common tests need `parameterized` (pip install .[test])")
modeling_common, configuration_common, tokenization_common, generation_utils = _import_common_tests()
STOOD_IN = [dotted for dotted in _STAND_INS if getattr(sys.modules[f"{PACKAGE}.{dotted}"], "STAND_IN", False)]
ModelTesterMixin = modeling_common.ModelTesterMixin
GenerationTesterMixin = generation_utils.GenerationTesterMixin
ids_tensor = modeling_common.ids_tensor


def _without_generation_stand_in(cls):
    """ModelTesterMixin's check that a tester of generating models takes GenerationTesterMixin, left out while an empty
    stand-in is that mixin (it would pass, checking nothing): `test_left_out_by_the_sdist` counts it."""
    if "generation.test_utils" in STOOD_IN:
        cls.test_generation_tester_mixin_inheritance = None  # not callable: not collected
    return cls


if STOOD_IN:

    @pytest.mark.parametrize("left_out", STOOD_IN)
    def test_left_out_by_the_sdist(left_out):
        """One skip for each of transformers' test files that the sdist leaves out, saying what does not run."""
        pytest.skip(
            f"{_LEFT_UNRUN[left_out]}: not run, tests/{left_out.replace('.', '/')}.py is not in transformers "
            f"{transformers.__version__}'s sdist; set VASWANI_TRANSFORMERS_TESTS to the tests/ folder of a transformers "
            "checkout of that version to run them"
        )


# ---- the model ----------------------------------------------------------------------------------------------------

PAD, BOS, EOS = 1, 0, 2


class VaswaniModelTester:
    """A tiny config and inputs, in the shape transformers' own model testers give them (see its tests/models/bart)."""

    def __init__(self, parent, position_embedding_type="sinusoidal", encoder_decoder=True):
        self.parent = parent
        self.position_embedding_type = position_embedding_type
        self.is_encoder_decoder = encoder_decoder
        self.batch_size = 3
        self.seq_length = self.encoder_seq_length = self.decoder_seq_length = 7
        self.is_training = True
        self.vocab_size = 99
        self.hidden_size = 32
        self.num_hidden_layers = 2
        self.num_attention_heads = 4
        self.num_labels = 3

    def get_config(self) -> VaswaniConfig:
        return VaswaniConfig(
            vocab_size=self.vocab_size, d_model=self.hidden_size, encoder_layers=self.num_hidden_layers,
            decoder_layers=self.num_hidden_layers, encoder_attention_heads=self.num_attention_heads,
            decoder_attention_heads=self.num_attention_heads, encoder_ffn_dim=37, decoder_ffn_dim=37,
            max_position_embeddings=64, position_embedding_type=self.position_embedding_type,
            dropout=0.1, num_labels=self.num_labels, is_encoder_decoder=self.is_encoder_decoder,
            pad_token_id=PAD, bos_token_id=BOS, eos_token_id=EOS, decoder_start_token_id=BOS,
        )

    def prepare_config_and_inputs_for_common(self):
        """Input ids ending in </s> (the sequence classifier reads the decoder's state there), no padding ids inside."""
        input_ids = ids_tensor([self.batch_size, self.seq_length], self.vocab_size).clamp(3)
        input_ids[:, -1] = EOS
        inputs = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids)}
        if self.is_encoder_decoder:
            decoder_input_ids = ids_tensor([self.batch_size, self.decoder_seq_length], self.vocab_size).clamp(3)
            inputs.update(decoder_input_ids=decoder_input_ids, decoder_attention_mask=torch.ones_like(decoder_input_ids))
        return self.get_config(), inputs

    def labels_for(self, model_class):
        """Fixed labels (two calls must give the same ones: the mixins compare two forwards), or None for no head."""
        if model_class is VaswaniForConditionalGeneration:
            return torch.arange(self.batch_size * self.decoder_seq_length).view(self.batch_size, -1) % self.vocab_size
        if model_class is VaswaniForSequenceClassification:
            return torch.arange(self.batch_size) % self.num_labels
        if model_class is VaswaniForTokenClassification:
            return torch.arange(self.batch_size * self.seq_length).view(self.batch_size, -1) % self.num_labels
        return None


class _VaswaniCommonTests(ModelTesterMixin):
    """What every test class below shares: the tester, and labels given by class rather than by Auto-mapping name."""

    position_embedding_type = "sinusoidal"
    is_encoder_decoder = True
    test_resize_position_embeddings = True  # a learned table; the other position types skip, saying why (below)
    test_torch_exportable = False  # the ExportTesterMixin's file is not in the sdist (see the module docstring)
    # transformers dates a model by the copyright line atop its config file, which ours has not (so: before 2023), and
    # checks `_init_weights` only for models it dates from 2023 on unless this is set; ours initializes every weight.
    test_can_init_all_missing_weights_before_2023 = True

    def setUp(self):
        self.model_tester = VaswaniModelTester(self, self.position_embedding_type, self.is_encoder_decoder)
        # The mixins skip the training tests for a base model (no loss) by finding its name among transformers' own
        # base models, and check the loss of sequence-to-sequence LM heads found by name: ours are listed there for
        # the duration of each test, as a model inside the library is.
        for mapping, names in [
            (modeling_common.MODEL_MAPPING_NAMES, ("VaswaniModel", "VaswaniEncoderModel")),
            (modeling_common.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES, "VaswaniForConditionalGeneration"),
        ]:
            listed = patch.dict(mapping, vaswani=names)
            listed.start()
            self.addCleanup(listed.stop)

    def test_resize_position_vector_embeddings(self):
        if self.position_embedding_type != "learned":
            self.skipTest(
                f"{self.position_embedding_type} positions have no table to resize (resize_position_embeddings only "
                "moves the limit); the learned table is resized in VaswaniSeq2SeqLearnedTest"
            )
        super().test_resize_position_vector_embeddings()

    def _prepare_for_class(self, inputs_dict, model_class, return_labels=False):
        inputs_dict = super()._prepare_for_class(inputs_dict, model_class, return_labels=False)
        if return_labels and (labels := self.model_tester.labels_for(model_class)) is not None:
            inputs_dict["labels"] = labels.to(modeling_common.torch_device)
        return inputs_dict


# The seq2seq testers take GenerationTesterMixin (its generate tests run where a source tree gives its file; the
# sdist's stand-in adds nothing, and `test_left_out_by_the_sdist` says so); the encoder-only one must not, as
# transformers' own check asserts.
@_without_generation_stand_in
class VaswaniSeq2SeqSinusoidalTest(GenerationTesterMixin, _VaswaniCommonTests, unittest.TestCase):
    all_model_classes = (VaswaniModel, VaswaniForConditionalGeneration, VaswaniForSequenceClassification)


@_without_generation_stand_in
class VaswaniSeq2SeqLearnedTest(GenerationTesterMixin, _VaswaniCommonTests, unittest.TestCase):
    position_embedding_type = "learned"
    all_model_classes = (VaswaniForConditionalGeneration,)  # the other position types: the class that runs them all


@_without_generation_stand_in
class VaswaniSeq2SeqRelativeTest(GenerationTesterMixin, _VaswaniCommonTests, unittest.TestCase):
    position_embedding_type = "relative"
    all_model_classes = (VaswaniForConditionalGeneration,)


@_without_generation_stand_in
class VaswaniEncoderOnlyTest(_VaswaniCommonTests, unittest.TestCase):
    position_embedding_type = "relative"
    is_encoder_decoder = False
    all_model_classes = (VaswaniForTokenClassification, VaswaniForSequenceClassification)  # bodies: VaswaniEncoderModel


# ---- the config ---------------------------------------------------------------------------------------------------

class VaswaniConfigTest(unittest.TestCase):
    def setUp(self):
        self.config_tester = configuration_common.ConfigTester(self, config_class=VaswaniConfig, d_model=64)

    def test_config(self):
        if configuration_common.config_common_kwargs is None:
            # check_config_arguments_init needs the common keyword arguments from tests/utils, not in the sdist
            self.config_tester.check_config_arguments_init = lambda: None
        self.config_tester.run_common_tests()


# ---- the tokenizer ------------------------------------------------------------------------------------------------

TOKENIZER_TEXTS = [
    "This is a test.", "A man is riding a horse along the beach.", "Two dogs play in the snow near a red house.",
    "Ein Mann reitet ein Pferd am Strand entlang.", "Zwei Hunde spielen im Schnee.", "Hello world, I was born in 92000.",
    "The quick brown fox jumps over the lazy dog!", "Привет, как дела?", "こんにちは世界", "Naïve café résumé.",
]


class VaswaniTokenizerTest(tokenization_common.TokenizerTesterMixin, unittest.TestCase):
    tokenizer_class = VaswaniTokenizer
    test_rust_tokenizer = False
    test_sentencepiece = False

    @classmethod
    def setUpClass(cls):
        """A tokenizer learned from a few sentences, saved where the mixin's tests look for it. (The mixin's own
        setUpClass downloads one from the Hub and reads tests/fixtures/, which the sdist leaves out.)"""
        cls.from_pretrained_id = []
        cls.tokenizers_list = []
        cls._data = "\n".join(TOKENIZER_TEXTS)
        cls.tmpdirname = tempfile.mkdtemp()
        VaswaniTokenizer.train_from_texts(TOKENIZER_TEXTS * 3, vocab_size=600, min_frequency=1).save_pretrained(
            cls.tmpdirname
        )
