"""modeling/remote_code/configuration_vaswani.py: VaswaniConfig's defaults (the paper's base model), presets, checks of
every field and size, and the round trip through AutoConfig."""

import json

import pytest
from transformers import AutoConfig

from vaswani import PRESETS, VaswaniConfig
from vaswani.cli import parse_config_overrides


def test_defaults_are_the_papers_base_model():
    config = VaswaniConfig()
    assert (config.d_model, config.encoder_layers, config.decoder_layers) == (512, 6, 6)
    assert (config.encoder_attention_heads, config.decoder_attention_heads) == (8, 8)
    assert (config.encoder_ffn_dim, config.decoder_ffn_dim) == (2048, 2048)
    assert config.dropout == 0.1
    assert config.activation_function == "relu"
    assert config.layer_norm_position == "post"
    assert config.position_embedding_type == "sinusoidal"
    assert config.scale_embedding is True
    assert config.tie_word_embeddings is True


def test_generation_needs_resolve():
    config = VaswaniConfig(encoder_layers=3, decoder_layers=2)
    assert config.num_hidden_layers == 2  # the decoder's, which the cache holds
    assert config.hidden_size == config.d_model
    assert config.decoder_start_token_id == config.bos_token_id == 1
    assert config.is_encoder_decoder


@pytest.mark.parametrize("name", ["tiny", "small", "base", "big"])
def test_presets(name):
    config = VaswaniConfig.from_preset(name)
    for field, value in PRESETS[name].items():
        assert getattr(config, field) == value
    assert VaswaniConfig.from_preset(name, dropout=0.2).dropout == 0.2


def test_base_and_big_are_the_papers_sizes():
    base, big = VaswaniConfig.from_preset("base"), VaswaniConfig.from_preset("big")
    assert (base.d_model, base.encoder_ffn_dim, base.encoder_attention_heads, base.dropout) == (512, 2048, 8, 0.1)
    assert (big.d_model, big.encoder_ffn_dim, big.encoder_attention_heads, big.dropout) == (1024, 4096, 16, 0.3)


def test_unknown_preset():
    with pytest.raises(ValueError, match="presets are"):
        VaswaniConfig.from_preset("huge")


@pytest.mark.parametrize(
    "overrides, field",
    [
        (dict(d_model=100, encoder_attention_heads=8), "d_model"),
        (dict(d_model=96, decoder_attention_heads=7), "decoder_attention_heads"),
        (dict(d_model=0), "d_model"),
        (dict(encoder_layers=-1), "encoder_layers"),
        (dict(decoder_ffn_dim=0), "decoder_ffn_dim"),
        (dict(vocab_size=0), "vocab_size"),
        (dict(max_position_embeddings=0), "max_position_embeddings"),
        (dict(dropout=1.0), "dropout"),
        (dict(attention_dropout=-0.1), "attention_dropout"),
        (dict(label_smoothing=1.5), "label_smoothing"),
        (dict(position_embedding_type="rotary"), "position_embedding_type"),
        (dict(layer_norm_position="middle"), "layer_norm_position"),
        (dict(activation_function="relu6"), "activation_function"),
        (dict(d_model=63, encoder_attention_heads=1, decoder_attention_heads=1), "d_model"),
        (dict(d_modle=256), "d_model"),
        (dict(layer_norm_eps=float("inf")), "layer_norm_eps"),
        (dict(layer_norm_eps=float("nan")), "layer_norm_eps"),
        (dict(layer_norm_eps=0.0), "layer_norm_eps"),
        (dict(layer_norm_eps=-1e-5), "layer_norm_eps"),
        (dict(vocab_size=100, pad_token_id=100), "pad_token_id"),
        (dict(bos_token_id=-1), "bos_token_id"),
        (dict(eos_token_id=[2, 37000]), "eos_token_id"),
        (dict(decoder_start_token_id=1.0), "decoder_start_token_id"),
        (dict(sep_token_id=37000), "sep_token_id"),
    ],
)
def test_invalid_values_name_the_field(overrides, field):
    with pytest.raises(ValueError, match=field):
        VaswaniConfig(**overrides)


def test_options_are_accepted():
    config = VaswaniConfig(layer_norm_position="pre", position_embedding_type="relative", activation_function="gelu")
    assert config.layer_norm_position == "pre"
    assert VaswaniConfig(position_embedding_type="learned", max_position_embeddings=64).max_position_embeddings == 64


def test_num_labels_is_not_defaulted_by_us():
    assert VaswaniConfig(num_labels=5).num_labels == 5
    assert VaswaniConfig(id2label={0: "neg", 1: "pos"}).num_labels == 2


def test_round_trip_through_auto_config(tmp_path):
    config = VaswaniConfig.from_preset("tiny", source_lang="en", target_lang="de", position_embedding_type="relative")
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, VaswaniConfig)
    assert loaded.to_diff_dict() == config.to_diff_dict()
    assert loaded.auto_map["AutoModelForSeq2SeqLM"] == "modeling_vaswani.VaswaniForConditionalGeneration"


def test_each_config_owns_its_dicts():
    first, second = VaswaniConfig(), VaswaniConfig()
    first.custom_pipelines["translation"]["pt"] = ("mutated",)
    first.auto_map["AutoModel"] = "mutated"
    assert second.custom_pipelines["translation"]["pt"] == ["AutoModelForSeq2SeqLM"]
    assert second.auto_map["AutoModel"] == "modeling_vaswani.VaswaniModel"


@pytest.mark.parametrize("field, value", [
    ("encoder_layers", 1_000_000), ("relative_attention_max_distance", 500_000_000), ("vocab_size", 10**9),
])
def test_a_config_asking_for_absurd_sizes_is_refused_before_anything_is_built(field, value, tmp_path):
    # a config from the Hub is untrusted input: it must not hang or allocate tens of GB
    with pytest.raises(ValueError, match=rf"`{field}` is {value:,}, more than this model allows"):
        VaswaniConfig(**{field: value})
    (tmp_path / "config.json").write_text(json.dumps({**VaswaniConfig().to_dict(), field: value}))
    with pytest.raises(ValueError, match=rf"`{field}` is {value:,}"):
        AutoConfig.from_pretrained(tmp_path)


def test_sizes_within_the_bounds_that_add_up_to_too_much_memory_are_refused():
    with pytest.raises(ValueError, match=r"about [\d,]+ parameters \([\d,]+ GB in fp32\), more than the 400 GB"):
        VaswaniConfig(d_model=32768, encoder_layers=512, decoder_layers=512, encoder_ffn_dim=131072,
                      decoder_ffn_dim=131072, encoder_attention_heads=8, decoder_attention_heads=8)
    assert VaswaniConfig.from_preset("big").estimated_parameters() < 300_000_000  # the paper's big model passes


def test_a_special_token_id_outside_the_vocabulary_is_named_with_the_allowed_range(tmp_path):
    """The embedding table has vocab_size rows: an id past it failed as an AssertionError while the model was built
    (padding_idx), or indexed past the table at the first input."""
    with pytest.raises(ValueError, match=r"`pad_token_id` is 1000, outside the vocabulary: a special-token id must be "
                                         r"an integer from 0 to 999 \(vocab_size=1000\), or None"):
        VaswaniConfig.from_preset("tiny", pad_token_id=1000)
    (tmp_path / "config.json").write_text(json.dumps({**VaswaniConfig.from_preset("tiny").to_dict(), "eos_token_id": 5000}))
    with pytest.raises(ValueError, match=r"`eos_token_id` is 5000, outside the vocabulary"):
        AutoConfig.from_pretrained(tmp_path)


def test_an_infinite_layer_norm_epsilon_in_a_config_file_is_refused(tmp_path):
    """With an infinite epsilon every normalized value is 0: the model ignores its input."""
    text = json.dumps(VaswaniConfig.from_preset("tiny").to_dict())[:-1] + ', "layer_norm_eps": Infinity}'
    (tmp_path / "config.json").write_text(text)
    with pytest.raises(ValueError, match=r"`layer_norm_eps` must be a finite positive number.*got inf"):
        AutoConfig.from_pretrained(tmp_path)


def test_values_set_after_construction_save_and_load_again(tmp_path):
    config = VaswaniConfig.from_preset("tiny")
    config.vocab_size, config.sep_token_id, config.eos_token_id, config.layer_norm_eps = 900, 899, [2, 3], 1e-6
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert (loaded.vocab_size, loaded.sep_token_id, loaded.eos_token_id, loaded.layer_norm_eps) == (900, 899, [2, 3], 1e-6)


def test_the_large_epsilon_transformers_test_helpers_set_saves_and_loads_again(tmp_path):
    """transformers' set_config_for_less_flaky_test sets every `*_eps` to 1.0 before saving a model and loading it
    back (its eager-vs-sdpa tests): a large finite epsilon is a valid LayerNorm."""
    config = VaswaniConfig.from_preset("tiny")
    config.layer_norm_eps = 1.0
    config.save_pretrained(tmp_path)
    assert AutoConfig.from_pretrained(tmp_path).layer_norm_eps == 1.0


def test_an_attribute_a_library_sets_saves_and_loads_again(tmp_path):
    """transformers' own test helpers set `layer_norm_epsilon` on any config: a saved config always reloads, keeping
    the attribute (which this model does not read)."""
    config = VaswaniConfig.from_preset("tiny")
    config.layer_norm_epsilon = 1e-6
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert (loaded.layer_norm_epsilon, loaded.layer_norm_eps) == (1e-6, config.layer_norm_eps)


def test_a_misspelled_field_is_refused_where_the_user_types_it():
    with pytest.raises(ValueError, match=r"--config_overrides: unknown config field 'layer_norm_epsilon'; did you mean "
                                         r"'layer_norm_eps'\?"):
        parse_config_overrides("dropout=0.2,layer_norm_epsilon=1e-6")
    assert parse_config_overrides("d_model=64,output_hidden_states=true") == {"d_model": 64, "output_hidden_states": True}
    # Python's spellings too: the string "False" would be a true value
    assert parse_config_overrides("is_encoder_decoder=False,use_cache=True,source_lang=None,target_lang=Falsey") == {
        "is_encoder_decoder": False, "use_cache": True, "source_lang": None, "target_lang": "Falsey"}
