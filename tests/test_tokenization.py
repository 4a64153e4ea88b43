"""modeling/remote_code/tokenization_vaswani.py and scripts/train_tokenizer.py: the round trip of any text, byte
fallback, language tags, saving and loading, and the script on local files and Multi30k."""

import copy
import json

import pytest
import torch
from tokenizers import AddedToken, Tokenizer
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from helpers import PAIRS, REPO, SHARED_DATA, as_saved_without_word_alignment, load_script, needs_shared_data, tiny_config
from vaswani import VaswaniForConditionalGeneration, VaswaniTokenizer
from vaswani.remote_code.tokenization_vaswani import update_tokenizer_file


train_tokenizer = load_script("train_tokenizer")


ORDINARY_TEXTS = [
    "A man is riding a horse.",
    "Ein Mädchen liest ein Buch im Park.",
    "Привет, как дела?",
    "こんにちは世界",
    "مرحبا بالعالم",
    "  leading, inner  and trailing spaces  ",
    "tabs\tand\nnewlines",
    "Numbers 3.14159 and symbols #@%&*!",
]
NEVER_SEEN = ["😀🎉👩‍👩‍👧", "ᚠᛇᚻ᛫ᛒᛦᚦ", "𝔘𝔫𝔦𝔠𝔬𝔡𝔢", "ℵ₀ ≠ ∅", "\u200bzero width"]
# text that looks like the tokenizer's own markup: control-token names, language tags, the word-start mark "▁" and the
# private-use characters that escape it
LOOKS_LIKE_MARKUP = [
    "<s> A man </s>", "<pad><unk>", ">>de<< Ein Mann", "x >>en<<", "\u2581", "a\u2581b \u2581c\u2581",
    "\u2581\u2581 \u2581", "\ue000", "\ue000\ue001", "\ue000\ue002", "\ue000\u2581\ue001\ue000\ue002\ue000",
    "\ue001\ue002\u2581",
]


def test_is_a_fast_tokenizer_with_the_special_tokens(tokenizer):
    assert isinstance(tokenizer, PreTrainedTokenizerFast)
    assert [tokenizer.pad_token_id, tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.unk_token_id] == [
        0, 1, 2, 3,
    ]
    assert tokenizer.padding_side == "right"
    assert tokenizer("A man.")["input_ids"][-1] == tokenizer.eos_token_id


@pytest.mark.parametrize("text", ORDINARY_TEXTS + NEVER_SEEN + LOOKS_LIKE_MARKUP)
def test_decode_encode_round_trip_without_unknowns(tokenizer, text):
    ids = tokenizer(text)["input_ids"]
    assert tokenizer.unk_token_id not in ids
    assert tokenizer.decode(ids, skip_special_tokens=True) == text


@pytest.mark.parametrize("text", LOOKS_LIKE_MARKUP)
def test_text_is_never_read_as_a_control_token(tokenizer, text):
    tagged = VaswaniTokenizer.train_from_texts(ORDINARY_TEXTS, vocab_size=400, min_frequency=1, language_codes=["de"])
    for candidate in (tokenizer, tagged):
        ids = candidate(text)["input_ids"]
        assert ids[-1] == candidate.eos_token_id
        assert not set(ids[:-1]) & set(candidate.all_special_ids), candidate.convert_ids_to_tokens(ids)
        assert candidate.decode(ids, skip_special_tokens=False) == text + "</s>"


def test_word_start_mark_in_the_text_is_not_a_space(tokenizer):
    assert tokenizer("a\u2581b")["input_ids"] != tokenizer("a b")["input_ids"]
    assert tokenizer.decode(tokenizer("a\u2581b")["input_ids"], skip_special_tokens=True) == "a\u2581b"


@pytest.fixture(scope="module")
def punctuation_tokenizer():
    texts = [text for pair in PAIRS for text in pair] + ORDINARY_TEXTS
    return VaswaniTokenizer.train_from_texts(texts * 3, vocab_size=600, min_frequency=1, split_punctuation=True)


def glued_to_punctuation(tokenizer) -> list[str]:
    """Vocabulary entries that join a punctuation mark to something else (`▁horse.`, `s,`)."""
    marks = set(".,!?;:'\"()")
    return [piece for piece in tokenizer.get_vocab() if set(piece) & marks and len(piece.lstrip("\u2581")) > 1]


def test_split_punctuation_makes_every_mark_a_piece_and_still_round_trips(tokenizer, punctuation_tokenizer, tmp_path):
    assert glued_to_punctuation(tokenizer)  # learned from the same texts without the option: `▁horse.` and such
    assert glued_to_punctuation(punctuation_tokenizer) == []
    pieces = punctuation_tokenizer.convert_ids_to_tokens(punctuation_tokenizer("A man, a horse.")["input_ids"])
    assert pieces[-3:] == ["\u2581horse", ".", "</s>"] and "," in pieces
    for text in ORDINARY_TEXTS + NEVER_SEEN + LOOKS_LIKE_MARKUP + ["(U.S.) don't, 3.5!"]:
        ids = punctuation_tokenizer(text)["input_ids"]
        assert punctuation_tokenizer.decode(ids, skip_special_tokens=True) == text
    punctuation_tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded("A man, a horse.")["input_ids"] == punctuation_tokenizer("A man, a horse.")["input_ids"]


def test_unseen_characters_fall_back_to_bytes(tokenizer):
    tokens = tokenizer.convert_ids_to_tokens(tokenizer("😀")["input_ids"])
    assert [t for t in tokens if t.startswith("<0x")] == ["<0xF0>", "<0x9F>", "<0x98>", "<0x80>"]


def test_empty_string(tokenizer):
    encoded = tokenizer("")
    assert encoded["input_ids"] == [tokenizer.eos_token_id]
    assert tokenizer.decode(encoded["input_ids"], skip_special_tokens=True) == ""


def test_text_target_gives_labels(tokenizer):
    source, target = PAIRS[0]
    batch = tokenizer([source], text_target=[target])
    assert batch["labels"][0] == tokenizer(target)["input_ids"]
    assert tokenizer.decode(batch["labels"][0], skip_special_tokens=True) == target


def test_truncation_and_padding(tokenizer):
    long_text = " ".join(pair[0] for pair in PAIRS) * 20
    batch = tokenizer(["", "short", long_text], padding=True, truncation=True, max_length=32, return_tensors="pt")
    assert batch["input_ids"].shape == (3, 32)
    assert batch["input_ids"][2, -1] == tokenizer.eos_token_id  # truncation keeps the end-of-sequence token
    assert batch["attention_mask"][0].sum() == 1 and batch["input_ids"][0, 1] == tokenizer.pad_token_id
    # without max_length, truncation stops at the tokenizer's model_max_length
    assert len(tokenizer(long_text, truncation=True)["input_ids"]) == tokenizer.model_max_length


def test_a_batch_mixing_empty_and_long_texts_runs_through_the_model(tokenizer):
    model = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer))).eval()
    long_text = " ".join(pair[0] for pair in PAIRS) * 30
    batch = tokenizer(["", long_text, "A man."], padding=True, truncation=True, return_tensors="pt")
    assert batch["input_ids"].shape[1] == model.config.max_position_embeddings
    generated = model.generate(**batch, max_new_tokens=5)
    assert generated.shape[0] == 3
    labels = tokenizer(text_target=["", "Ein Mann.", long_text], padding=True, truncation=True, return_tensors="pt")
    loss = model(**batch, labels=labels["input_ids"].masked_fill(labels["attention_mask"] == 0, -100)).loss
    assert torch.isfinite(loss)


def test_language_tags(tmp_path):
    tokenizer = VaswaniTokenizer.train_from_texts([p for pair in PAIRS for p in pair], vocab_size=400,
                                                  min_frequency=1, language_codes=["en", "de"])
    tokenizer.save_pretrained(tmp_path)
    for candidate in (tokenizer, AutoTokenizer.from_pretrained(tmp_path)):
        assert candidate.language_tags == {"en": ">>en<<", "de": ">>de<<"}
        untagged = candidate("A man.")["input_ids"]
        candidate.tgt_lang = "de"
        ids = candidate("A man.")["input_ids"]
        assert ids == [candidate.convert_tokens_to_ids(">>de<<")] + untagged
        assert candidate.decode(ids, skip_special_tokens=True) == "A man."
        both = candidate(["A man.", "A dog."], text_target=["Ein Mann.", "Ein Hund."], padding=True)
        assert [row[0] for row in both["input_ids"]] == [ids[0]] * 2
        assert both["labels"][0][: len(untagged)] == candidate(text_target="Ein Mann.")["input_ids"]
        assert candidate.convert_tokens_to_ids(">>de<<") not in both["labels"][0]
        assert len(candidate("A man. " * 50, truncation=True, max_length=10)["input_ids"]) == 10
        candidate.tgt_lang = None
        assert candidate("A man.")["input_ids"] == untagged
        with pytest.raises(ValueError, match=r"tgt_lang='fr'.*\['de', 'en'\]"):
            candidate.tgt_lang = "fr"
    with pytest.raises(ValueError, match="no language tags"):
        VaswaniTokenizer.train_from_texts(ORDINARY_TEXTS, vocab_size=400, min_frequency=1).tgt_lang = "de"


def test_training_arguments_are_checked():
    with pytest.raises(ValueError, match="vocab_size"):
        VaswaniTokenizer.train_from_texts(["a b c"], vocab_size=100)
    with pytest.raises(ValueError, match="empty"):
        VaswaniTokenizer.train_from_texts([], vocab_size=400)
    with pytest.raises(TypeError, match="strings"):
        VaswaniTokenizer.train_from_texts(["fine", 42], vocab_size=400)


def test_save_and_load_through_auto_tokenizer(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    # tokenizer.json without indentation: the JSON the backend holds, in less than half the bytes
    written, held = (tmp_path / "tokenizer.json").read_text(encoding="utf-8"), tokenizer.backend_tokenizer.to_str(True)
    assert "\n" not in written.strip() and json.loads(written) == json.loads(held) and len(written) < len(held) / 2
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert type(loaded) is VaswaniTokenizer
    for text in ORDINARY_TEXTS + NEVER_SEEN + LOOKS_LIKE_MARKUP:
        assert loaded(text)["input_ids"] == tokenizer(text)["input_ids"]
        assert loaded.decode(loaded(text)["input_ids"], skip_special_tokens=True) == text


# --- scripts/train_tokenizer.py ------------------------------------------------------------------------------------


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows), encoding="utf-8")
    return path


def test_train_tokenizer_script_from_local_json_lines(tmp_path):
    data = write_jsonl(tmp_path / "pairs.jsonl", [{"en": en, "de": de} for en, de in PAIRS] * 5)
    out = tmp_path / "tok"
    train_tokenizer.main(
        ["--train_file", str(data), "--columns", "en", "de", "--vocab_size", "500", "--min_frequency", "1",
         "--output_dir", str(out)]
    )
    loaded = AutoTokenizer.from_pretrained(out)
    assert len(loaded) == 500
    assert loaded.decode(loaded(PAIRS[3][1])["input_ids"], skip_special_tokens=True) == PAIRS[3][1]


DIALOGUE = "Amanda: I baked  cookies. Do you want some?\nJerry: Sure!\nAmanda: I'll bring you tomorrow :-)"
LINE_TEXTS = [DIALOGUE, "\nJerry", "a\n\nb", "a\n b", "a \nb", "x\r\ny", "\n", " \n ", "end\n", "Ü\nß ok",
              "Привет!\nこんにちは"]


@pytest.fixture(scope="module")
def newline_tokenizer():
    texts = [DIALOGUE, "Jerry will get cookies from Amanda.", "Amanda and Jerry"] + ORDINARY_TEXTS
    return VaswaniTokenizer.train_from_texts(texts * 3, vocab_size=600, min_frequency=1, split_newlines=True,
                                             split_punctuation=True)


def test_split_newlines_makes_a_speaker_at_the_start_of_a_turn_the_same_piece_as_elsewhere(tokenizer,
                                                                                           newline_tokenizer):
    glued = VaswaniTokenizer.train_from_texts([DIALOGUE] * 3 + ORDINARY_TEXTS, vocab_size=600, min_frequency=1,
                                              split_punctuation=True)
    assert "\u2581Jerry" not in glued.tokenize(DIALOGUE)  # without the option the break sticks to the name
    pieces = newline_tokenizer.tokenize(DIALOGUE)
    assert pieces.count("\n") == 2 and pieces.count("\u2581Amanda") == 2 and "\u2581Jerry" in pieces
    assert newline_tokenizer.tokenize("Jerry will get cookies")[0] == "\u2581Jerry"
    assert all("\n" not in piece or piece == "\n" for piece in newline_tokenizer.get_vocab())


@pytest.mark.parametrize("text", LINE_TEXTS + ORDINARY_TEXTS + NEVER_SEEN + LOOKS_LIKE_MARKUP)
def test_split_newlines_still_round_trips(newline_tokenizer, text):
    ids = newline_tokenizer(text)["input_ids"]
    assert newline_tokenizer.unk_token_id not in ids
    assert newline_tokenizer.decode(ids, skip_special_tokens=True) == text


def test_split_newlines_survives_save_and_auto_reload(newline_tokenizer, tmp_path):
    newline_tokenizer.save_pretrained(tmp_path)
    loaded = AutoTokenizer.from_pretrained(tmp_path)
    assert loaded.tokenize(DIALOGUE) == newline_tokenizer.tokenize(DIALOGUE)
    assert loaded.decode(loaded(DIALOGUE)["input_ids"], skip_special_tokens=True) == DIALOGUE


# --- offsets: a word's tokens cover the word, not the space before it ----------------------------------------------

SENTENCE, WORD_STARTS = "John Smith lives in Berlin.", [0, 5, 11, 17, 20]
LEARNED_TOKENIZERS = ["tokenizer", "punctuation_tokenizer", "newline_tokenizer"]
ALL_TEXTS = [SENTENCE] + ORDINARY_TEXTS + NEVER_SEEN + LOOKS_LIKE_MARKUP + LINE_TEXTS


def token_spans(tokenizer, text) -> list[tuple[str, str]]:
    """(token, the text its offsets cover) for each token of `text` but the special ones."""
    encoding = tokenizer(text, return_offsets_mapping=True, return_special_tokens_mask=True)
    tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"])
    return [(token, text[start:end]) for token, (start, end), special
            in zip(tokens, encoding["offset_mapping"], encoding["special_tokens_mask"]) if not special]


def word_start_offsets(tokenizer, text) -> list[int]:
    """Where the offsets of each token that starts a word ("▁...") start."""
    encoding = tokenizer(text, return_offsets_mapping=True)
    tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"])
    return [start for token, (start, _) in zip(tokens, encoding["offset_mapping"]) if token.startswith("\u2581")]


@pytest.mark.parametrize("name", LEARNED_TOKENIZERS)
def test_each_word_starts_at_its_first_character_with_the_same_tokens_as_before(name, request):
    tokenizer = request.getfixturevalue(name)
    assert word_start_offsets(tokenizer, SENTENCE) == WORD_STARTS
    for text in ALL_TEXTS:
        spans = token_spans(tokenizer, text)
        for token, covered in spans:
            # only a mark standing for a space of its own (a run of spaces) covers a space, and just that one
            assert " " not in covered or (token == "\u2581" and covered == " "), (text, spans)
            assert covered, (text, spans)
        text_characters = "".join(character for character in text if not character.isspace())
        assert set(text_characters) <= set("".join(covered for _, covered in spans)), (text, spans)
    # the tokenizer as saved before (offsets from the space before each word, spaces left to Metaspace): same ids
    before, saved_before = copy.deepcopy(tokenizer), as_saved_without_word_alignment(tokenizer.backend_tokenizer)
    before.backend_tokenizer.pre_tokenizer = saved_before.pre_tokenizer
    before.backend_tokenizer.normalizer = saved_before.normalizer
    assert word_start_offsets(before, SENTENCE) == [0, 4, 10, 16, 19]
    for text in ALL_TEXTS + [PAIRS[0][0] + "  \n " + PAIRS[1][1]]:
        assert before(text)["input_ids"] == tokenizer(text)["input_ids"], text


@pytest.mark.parametrize("name", LEARNED_TOKENIZERS)
def test_a_token_the_user_adds_is_used_where_it_stands_as_a_word(name, request):
    tokenizer = copy.deepcopy(request.getfixturevalue(name))
    assert tokenizer.add_tokens(["zzzq", "new word"]) == 2
    zzzq, new_word = len(tokenizer) - 2, len(tokenizer) - 1
    for text in ["a zzzq horse", "zzzq", "The new word is zzzq", "a  zzzq \nhorse."]:
        ids = tokenizer(text)["input_ids"]
        assert zzzq in ids, (text, tokenizer.convert_ids_to_tokens(ids))
        assert tokenizer.decode(ids, skip_special_tokens=True) == text
    assert new_word in tokenizer("The new word is zzzq")["input_ids"]
    assert zzzq in tokenizer("zzzq.")["input_ids"]  # (decoded "zzzq .": see the module's docstring)
    assert zzzq not in tokenizer("azzzqb")["input_ids"]  # inside another word it is that word's letters
    # special tokens typed in text stay text (split_special_tokens), added tokens or not
    assert tokenizer.bos_token_id not in tokenizer("a <s> zzzq")["input_ids"][:-1]


SHIPPED_TOKENIZERS = ["multi30k_en_de", "conll2003"]  # a translator's joint vocabulary, a tagger's (punctuation split)


def learned_or_shipped(name, request):
    """A copy of a tokenizer learned in this module (a fixture's name) or of a shipped model's (its results/ folder)."""
    if name in SHIPPED_TOKENIZERS:
        return VaswaniTokenizer.from_pretrained(REPO / "results" / name / "model")
    return copy.deepcopy(request.getfixturevalue(name))


@pytest.mark.parametrize("name", LEARNED_TOKENIZERS + SHIPPED_TOKENIZERS)
def test_an_added_token_s_offsets_cover_it_without_the_space_before_it(name, request):
    tokenizer = learned_or_shipped(name, request)
    tokenizer.add_tokens(["zzzq"])
    zzzq = tokenizer.convert_tokens_to_ids("zzzq")
    for text, span in [("a zzzq horse", (2, 6)), ("zzzq horse", (0, 4)), ("a  zzzq", (3, 7)), (" zzzq", (1, 5)),
                       ("The new zzzq.", (8, 12))]:
        encoding = tokenizer(text, return_offsets_mapping=True)
        assert encoding["offset_mapping"][encoding["input_ids"].index(zzzq)] == span, text
    batch = tokenizer(["a zzzq", "bb zzzq"], return_offsets_mapping=True, padding=True, return_tensors="pt")
    assert batch["offset_mapping"][batch["input_ids"] == zzzq].tolist() == [[2, 6], [3, 7]]
    words = tokenizer(["a", "zzzq"], is_split_into_words=True, return_offsets_mapping=True)
    assert words["offset_mapping"][words["input_ids"].index(zzzq)] == (0, 4)  # offsets within its word


@pytest.mark.parametrize("name", ["tokenizer", "punctuation_tokenizer", "newline_tokenizer"] + SHIPPED_TOKENIZERS)
def test_a_special_token_the_user_adds_is_one_token_where_it_is_typed(name, request, tmp_path):
    tokenizer = learned_or_shipped(name, request)
    assert tokenizer.add_special_tokens({"additional_special_tokens": ["<sep2>"]}) == 1
    sep2 = tokenizer.convert_tokens_to_ids("<sep2>")
    assert "<sep2>" in tokenizer.all_special_tokens and sep2 in tokenizer.all_special_ids
    tokenizer.save_pretrained(tmp_path)
    for candidate in (tokenizer, VaswaniTokenizer.from_pretrained(tmp_path), AutoTokenizer.from_pretrained(tmp_path)):
        assert candidate.convert_tokens_to_ids("<sep2>") == sep2 and "<sep2>" in candidate.all_special_tokens
        # typed between words, glued to them, first or last: one token, the words around it as without it
        for text, without in [("x <sep2> y", "x y"), ("x<sep2>y", "x y"), ("<sep2> A man.", "A man."),
                              ("A man. <sep2>", "A man.")]:
            ids = candidate(text)["input_ids"]
            assert ids.count(sep2) == 1, (text, candidate.convert_ids_to_tokens(ids))
            assert [i for i in ids if i != sep2] == candidate(without)["input_ids"], text
            assert candidate.decode(ids, skip_special_tokens=True) == without
            assert "<sep2>" in candidate.decode(ids)
        # the control tokens typed in a text stay text, beside the one the user added
        ids = candidate("<s> x </s> <sep2> <pad>")["input_ids"]
        assert ids.count(sep2) == 1 and not set(ids[:-1]) & {candidate.bos_token_id, candidate.eos_token_id,
                                                              candidate.pad_token_id}
        assert candidate.decode(ids, skip_special_tokens=True) == "<s> x </s> <pad>"


def test_a_folder_saved_with_a_user_s_special_token_the_backend_never_matched_gets_it_matched(tokenizer, tmp_path):
    tokenizer.save_pretrained(tmp_path)
    backend = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    backend.add_special_tokens([AddedToken("<sep2>", normalized=False, special=True)])  # as transformers adds it
    backend.save(str(tmp_path / "tokenizer.json"))
    config = json.loads((tmp_path / "tokenizer_config.json").read_text(encoding="utf-8"))
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({**config, "extra_special_tokens": ["<sep2>"]}))
    loaded = VaswaniTokenizer.from_pretrained(tmp_path)
    ids = loaded("x <sep2> y")["input_ids"]
    assert ids.count(loaded.convert_tokens_to_ids("<sep2>")) == 1
    assert loaded.decode(ids, skip_special_tokens=True) == "x y"


def test_adding_a_special_token_keeps_the_language_tags(tmp_path):
    tagged = VaswaniTokenizer.train_from_texts(ORDINARY_TEXTS, vocab_size=400, min_frequency=1, language_codes=["de"])
    tagged.add_special_tokens({"additional_special_tokens": ["<sep2>"]})  # (replaces transformers' list of extras)
    tagged.save_pretrained(tmp_path)
    for candidate in (tagged, VaswaniTokenizer.from_pretrained(tmp_path)):
        assert candidate.language_tags == {"de": ">>de<<"}
        candidate.tgt_lang = "de"
        tag, sep2 = candidate.convert_tokens_to_ids([">>de<<", "<sep2>"])
        ids = candidate("a >>de<< <sep2> b")["input_ids"]
        assert ids[0] == tag and ids.count(tag) == 1 and ids.count(sep2) == 1  # the typed tag stays text
        assert candidate.decode(ids, skip_special_tokens=True) == "a >>de<< b"


def test_a_tokenizer_saved_before_word_offsets_gets_them_when_loaded_and_when_resaved(punctuation_tokenizer, tmp_path):
    punctuation_tokenizer.save_pretrained(tmp_path)
    as_saved_without_word_alignment(punctuation_tokenizer.backend_tokenizer).save(str(tmp_path / "tokenizer.json"))
    old_file = (tmp_path / "tokenizer.json").read_text(encoding="utf-8")
    assert word_start_offsets(VaswaniTokenizer.from_pretrained(tmp_path), SENTENCE) == WORD_STARTS
    assert (tmp_path / "tokenizer.json").read_text(encoding="utf-8") == old_file  # loading changes no file
    assert update_tokenizer_file(tmp_path) is True
    assert update_tokenizer_file(tmp_path) is False  # once is enough
    resaved = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    encoding = resaved.encode(SENTENCE)
    assert [start for token, (start, _) in zip(encoding.tokens, encoding.offsets)
            if token.startswith("\u2581")] == WORD_STARTS
    assert encoding.ids == punctuation_tokenizer(SENTENCE)["input_ids"]


def test_train_tokenizer_script_splits_punctuation_on_request(tmp_path):
    data = write_jsonl(tmp_path / "pairs.jsonl", [{"en": en, "de": de} for en, de in PAIRS] * 5)
    options = ["--train_file", str(data), "--columns", "en", "de", "--vocab_size", "500", "--min_frequency", "1"]
    glued = train_tokenizer.main(options + ["--output_dir", str(tmp_path / "glued")])
    split = train_tokenizer.main(options + ["--output_dir", str(tmp_path / "split"), "--split_punctuation"])
    assert glued_to_punctuation(glued) and glued_to_punctuation(split) == []
    lines = train_tokenizer.main(options + ["--output_dir", str(tmp_path / "lines"), "--split_newlines"])
    # no line break in these texts: it is spelled as its byte, a piece of its own, and the next word starts afresh
    assert lines.tokenize("spielen\nspielen") == ["\u2581spielen", "<0x0A>", "\u2581spielen"]


def test_train_tokenizer_script_from_csv(tmp_path):
    data = tmp_path / "pairs.csv"
    data.write_text("document,summary\n" + "".join(f'"{en}","{de}"\n' for en, de in PAIRS * 5), encoding="utf-8")
    tokenizer = train_tokenizer.main(
        ["--train_file", str(data), "--columns", "document", "summary", "--vocab_size", "450", "--min_frequency", "1",
         "--output_dir", str(tmp_path / "tok")]
    )
    assert len(tokenizer) == 450


@needs_shared_data
def test_train_tokenizer_script_on_multi30k(tmp_path):
    tokenizer = train_tokenizer.main(
        ["--train_file", str(SHARED_DATA / "multi30k" / "train.jsonl"), "--columns", "en", "de", "--vocab_size", "2000",
         "--max_train_samples", "2000", "--output_dir", str(tmp_path / "tok")]
    )
    sentence = "Zwei junge Männer spielen Fußball auf einer Wiese."
    assert tokenizer.decode(tokenizer(sentence)["input_ids"], skip_special_tokens=True) == sentence


def test_train_tokenizer_script_bad_input(tmp_path):
    data = write_jsonl(tmp_path / "pairs.jsonl", [{"en": en, "de": de} for en, de in PAIRS])
    with pytest.raises(ValueError, match=r"Column 'fr' is not in .*\['en', 'de'\]"):
        train_tokenizer.main(["--train_file", str(data), "--columns", "en", "fr", "--output_dir", str(tmp_path / "t")])

    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"en": "fine"}\n{"en": "not closed\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"broken.jsonl, line 2: not valid JSON"):
        train_tokenizer.main(["--train_file", str(broken), "--columns", "en", "--output_dir", str(tmp_path / "t")])

    latin1 = tmp_path / "latin1.jsonl"
    latin1.write_bytes('{"en": "ok"}\n{"en": "caf\u00e9"}\n'.encode("latin-1"))
    with pytest.raises(ValueError, match=r"latin1.jsonl, line 2: not valid UTF-8"):
        train_tokenizer.main(["--train_file", str(latin1), "--columns", "en", "--output_dir", str(tmp_path / "t")])

    empty = tmp_path / "empty.jsonl"
    empty.write_text("", encoding="utf-8")
    with pytest.raises(ValueError):
        train_tokenizer.main(["--train_file", str(empty), "--columns", "en", "--output_dir", str(tmp_path / "t")])
