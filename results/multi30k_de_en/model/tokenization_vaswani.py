"""The project's tokenizer: one joint subword (BPE) vocabulary for source and target, with byte fallback.

The paper encodes sentences with byte-pair encoding over a shared source-target vocabulary (section 5.1). Here a
character the vocabulary lacks is spelled as its UTF-8 bytes (`<0xE2>`, `<0x82>`, ...), so no input ever maps to
`<unk>`, and `decode(encode(text)) == text` for any text: nothing is normalized away. Text is only ever text: the
strings `<s>`, `</s>`, `<pad>`, `<unk>` and `>>de<<` in an input are spelled as ordinary pieces, never read as the
control tokens of the same name (transformers' `split_special_tokens`; a special token a user adds is matched, see
below), and a literal `▁` (U+2581, the word-start mark) is escaped on the way in and restored on the way out.

A token's offsets (`return_offsets_mapping=True`) cover its characters in the text and not the space before a word:
the word-start mark of `▁Smith` takes the place of the word's first character, so in "John Smith" the token spans
(5, 7) "Sm", not (4, 7) " Sm". Only a mark that stands for a space of its own (a run of spaces) covers that space.
Word boundaries, and so the token-classification pipeline's words, come out exact (pipeline_vaswani.py).

A token a user adds (`add_tokens(["zzzq"])`) is used where a word starts with it ("a zzzq horse"), not inside a word
("azzzqb"), and its offsets, like a word's, start at its first character: (2, 6) in "a zzzq horse". (It is matched in
the normalized text "▁a▁zzzq▁horse" with the mark of the word it is, the mark standing for the space before it; its
offsets are moved past that space here, as the pre-tokenizer moves a word's.) Decoding gives the text back where a
space or the end of the text follows the added token; what follows it directly ("zzzq." or "zzzq\nb") starts a word of
its own, so decoding puts a space before it ("zzzq .").

A special token a user adds (`add_special_tokens({"additional_special_tokens": ["<sep2>"]})`, a new `mask_token`,
`add_tokens(..., special_tokens=True)`) is one token wherever it is typed, between words or glued to them ("x<sep2>y"),
and takes the whitespace around it (its offsets cover that too, (1, 9) in "x <sep2> y"): the words on either side keep
their own tokens, as without it. It is special everywhere else: listed in `all_special_tokens`, dropped by
`decode(..., skip_special_tokens=True)` ("x <sep2> y" -> "x y"), saved and loaded as such. The built-in `<s>`, `</s>`,
`<pad>`, `<unk>` and the language tags stay text when typed, as above: the tokenizer and the model place them (every
sequence's end, the decoder's start, padding, the tag of `tgt_lang`), so a text that holds them as characters (an HTML
`<s>`, a quoted `>>de<<`) must not end a sequence early or switch the target language; a token a user adds as special
is there to be typed, in the data it marks. The backend's switch for special tokens in text (`encode_special_tokens`,
set from `split_special_tokens`) is one for all of them, so a user's special token is given to the backend as an
ordinary added token, always matched, and transformers' side treats it as special (`_add_tokens`).

Every sequence ends with `</s>`; the decoder starts from `<s>`. Optional language tags (`>>de<<`) are special tokens
that a multilingual model reads at the start of the source: set `tokenizer.tgt_lang = "de"` and every source it
encodes starts with the tag's id (targets, `text_target=...`, never do), as NLLB's tokenizer does with `src_lang`.
`tgt_lang` is a setting of the tokenizer, not of a call: the tag lives in the backend's post-processor, which a call
with `text_target` takes off and puts back around the targets. A tokenizer shared by threads should therefore not
have `tgt_lang` changed per call, nor be called with `text_target` while another thread encodes tagged sources; the
pipelines put each call's tag first themselves and never set it.

A tokenizer folder may come from elsewhere: its JSON files are bounded before transformers parses them
(`from_pretrained`).

This file is copied into every saved model, so it imports from this project only configuration_vaswani.py (the
bounds of a model's files), with a relative import: transformers copies that file beside it.
"""

import json
import re
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tokenizers import AddedToken, Regex, Tokenizer, decoders, normalizers, pre_tokenizers, processors
from tokenizers.models import BPE
from tokenizers.trainers import BpeTrainer
from transformers import PreTrainedTokenizerFast

from .configuration_vaswani import check_json_file, check_regular_files


PAD, BOS, EOS, UNK = "<pad>", "<s>", "</s>", "<unk>"
SPECIAL_TOKENS = [PAD, BOS, EOS, UNK]  # ids 0, 1, 2, 3, as in VaswaniConfig's defaults
BYTE_TOKENS = [f"<0x{byte:02X}>" for byte in range(256)]
WORD_START = "\u2581"  # "▁" marks the start of a word, as in SentencePiece
# A literal "▁" in the text must not read as a word start. It is written ESCAPE + ESCAPED_WORD_START on the way in,
# and a literal ESCAPE as ESCAPE + ESCAPED_ESCAPE, so every ESCAPE in the normalized text starts one of these two pairs
# and decoding undoes both exactly (private-use characters: they reach the model as UTF-8 byte tokens).
ESCAPE, ESCAPED_ESCAPE, ESCAPED_WORD_START = "\ue000", "\ue001", "\ue002"


# The files of a saved tokenizer that transformers parses as JSON.
TOKENIZER_JSON_FILES = ("tokenizer_config.json", "tokenizer.json", "special_tokens_map.json", "added_tokens.json")


def language_tag(code: str) -> str:
    return f">>{code}<<"


def is_language_tag(token: str) -> bool:
    return token.startswith(">>") and token.endswith("<<") and len(token) > 4


def is_control_token(token: str) -> bool:
    """Whether a special token is one the tokenizer and model place themselves (the four of every vocabulary and the
    language tags), which stays text when typed; any other special token a user adds is matched where typed."""
    return token in SPECIAL_TOKENS or is_language_tag(token)


class VaswaniTokenizer(PreTrainedTokenizerFast):
    """A fast tokenizer (backed by `tokenizers`) for the Vaswani models.

    Build one with [`VaswaniTokenizer.train_from_texts`], load one with `from_pretrained`. It behaves like any
    transformers tokenizer: `tokenizer(src, text_target=tgt)` gives `input_ids`, `attention_mask` and `labels`;
    truncation and padding work as usual (padding on the right).
    """

    vocab_files_names = {"tokenizer_file": "tokenizer.json"}
    model_input_names = ["input_ids", "attention_mask"]
    padding_side = "right"
    # (no __init__ of its own: transformers then loads tokenizer.json as it is, instead of rebuilding the backend)
    _tgt_lang: str | None = None
    _template_tag: str | None = None  # the tag the post-processor now puts first

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *args, **kwargs):
        """As in transformers, except that the JSON files of a local folder are bounded first (`check_json_file`): a
        damaged or hostile file is named, instead of exhausting the interpreter's stack while it is parsed."""
        folder = Path(str(pretrained_model_name_or_path)) / (kwargs.get("subfolder") or "")
        if folder.is_dir():
            check_tokenizer_files(folder)
        return super().from_pretrained(pretrained_model_name_or_path, *args, **kwargs)

    @classmethod
    def _from_pretrained(cls, *args, **kwargs):
        """As in transformers; a tokenizer saved before its word starts had exact offsets, or before added tokens were
        found in text, gets both (`update_saved_tokenizer`: the same tokens and ids), and one saved with a special token
        its user added as a token the backend never matches gets it matched (see the module's docstring)."""
        tokenizer = super()._from_pretrained(*args, **kwargs)
        update_saved_tokenizer(tokenizer.backend_tokenizer)
        user_special = [token for token in tokenizer.all_special_tokens if not is_control_token(token)]
        if user_special:
            tokenizer._add_tokens(user_special, special_tokens=True)
        return tokenizer

    def _add_tokens(self, new_tokens, special_tokens=False) -> int:
        """As in transformers, except for a special token the user adds: the backend gets it as a token matched
        wherever it is typed, taking the spaces around it, and transformers lists it among the special tokens (see the
        module's docstring). The built-in special tokens and the language tags stay special in the backend, so that
        the tokenizer's `split_special_tokens` keeps them text when typed."""
        control, typed, ordinary = [], [], []
        for token in new_tokens:
            content = str(token)
            if not (special_tokens or getattr(token, "special", False)):
                ordinary.append(token)
            elif is_control_token(content):
                control.append(token)
            else:
                single_word = getattr(token, "single_word", False)
                typed.append(AddedToken(content, single_word=single_word, lstrip=True, rstrip=True, normalized=False,
                                        special=False))
                if content not in self.all_special_tokens:
                    self._extra_special_tokens.append(content)
        held = {token.content: token.__getstate__() for token in self.added_tokens_decoder.values()}
        added = self._tokenizer.add_special_tokens(control) if control else 0
        added += sum(self._tokenizer.add_tokens(tokens) for tokens in (typed, ordinary) if tokens)
        if any(held.get(token.content, token.__getstate__()) != token.__getstate__() for token in typed):
            # a token the backend held with other settings (special, never matched when typed): it updates the
            # settings it lists but goes on matching as before until it is built again from them
            self._tokenizer = Tokenizer.from_str(self._tokenizer.to_str())
        return added

    def _decode(self, token_ids, skip_special_tokens=False, **kwargs) -> str:
        """As in transformers; with `skip_special_tokens`, the special tokens a user added are dropped too (the backend
        holds them as ordinary tokens, see `_add_tokens`)."""
        if skip_special_tokens:
            token_ids = [token_ids] if isinstance(token_ids, int) else token_ids
            special = set(self.all_special_ids)
            token_ids = [token_id for token_id in token_ids if token_id not in special]
        return super()._decode(token_ids, skip_special_tokens=skip_special_tokens, **kwargs)

    def _convert_encoding(self, encoding, **kwargs):
        """As in transformers, with the offsets of a token a user added moved past the space its word-start mark
        stands for: (2, 6) for "zzzq" in "a zzzq horse", not (1, 6), as every other word's (see the module's
        docstring)."""
        encoding_dict, encodings = super()._convert_encoding(encoding, **kwargs)
        lengths = self._word_marked_added_tokens() if "offset_mapping" in encoding_dict else {}

        def past_the_space(token_id: int, start: int, end: int) -> tuple[int, int]:
            return (start + 1, end) if token_id in lengths and end - start == lengths[token_id] + 1 else (start, end)

        if lengths:
            encoding_dict["offset_mapping"] = [
                [past_the_space(token_id, start, end) for token_id, (start, end) in zip(each.ids, offsets)]
                for each, offsets in zip(encodings, encoding_dict["offset_mapping"])
            ]
        return encoding_dict, encodings

    def _word_marked_added_tokens(self) -> dict[int, int]:
        """Id -> length of each added token the backend matches in the normalized text with the word-start mark before
        it. Such a token's offsets cover the character the mark stands for: one more than the token where the mark
        stands for a space, as many where it was put before the text (nothing to move then)."""
        normalizer = self._tokenizer.normalizer
        return {
            token_id: len(token.content)
            for token_id, token in self.added_tokens_decoder.items()
            if token.normalized and normalizer is not None
            and normalizer.normalize_str(token.content).startswith(WORD_START)
        }

    def _save_pretrained(self, save_directory, file_names, legacy_format=None, filename_prefix=None):
        """As in transformers, with tokenizer.json written without indentation: the same JSON in less than half the
        bytes (557,770 -> 246,560 for the shipped SST-2 tokenizer), which every saved model carries."""
        file_names = super()._save_pretrained(save_directory, file_names, legacy_format, filename_prefix)
        path = Path(save_directory) / f"{filename_prefix + '-' if filename_prefix else ''}tokenizer.json"
        self.backend_tokenizer.save(str(path), pretty=False)
        return file_names

    @classmethod
    def train_from_texts(
        cls,
        texts: Iterable[str],
        vocab_size: int = 8000,
        min_frequency: int = 2,
        language_codes: Iterable[str] = (),
        model_max_length: int = 1024,
        show_progress: bool = False,
        split_punctuation: bool = False,
        split_newlines: bool = False,
    ) -> "VaswaniTokenizer":
        """Learn a BPE vocabulary of `vocab_size` tokens (special and byte tokens included) from `texts`, an
        iterable of strings (source and target sentences alike, for one joint vocabulary).

        With `split_punctuation`, every punctuation mark is a piece of its own, as after the Moses tokenization that
        setups like the paper's run before BPE: the vocabulary then spends no entries on a word glued to its comma or
        full stop (`▁Gebäude.`; 1,098 of 8,000 entries learned from Multi30k), and decoding still restores the text
        exactly (a mark carries no word-start mark, so it joins the word before it).

        With `split_newlines`, every line break is a piece of its own and the first word of a line is marked as a
        word start, as a word after a space is. Without it, the break glues the last word of one line to the first
        of the next (`?\nJerry:`, `!\nA` + `manda:` in a SAMSum dialogue), so a speaker's name at the start of a
        turn is a different piece from the same name elsewhere (`▁Jerry`), and a model cannot copy it by identity.
        Decoding still restores the text exactly."""
        tags = [language_tag(code) for code in language_codes]
        reserved = len(SPECIAL_TOKENS) + len(tags) + len(BYTE_TOKENS)
        if vocab_size <= reserved:
            raise ValueError(
                f"vocab_size={vocab_size} leaves no room for learned subwords: {reserved} ids are taken by special, "
                f"language and byte tokens. Use a vocab_size above {reserved}."
            )
        if min_frequency < 1:
            raise ValueError(f"min_frequency must be at least 1, got {min_frequency}.")

        backend = Tokenizer(BPE(unk_token=UNK, byte_fallback=True))
        # The only normalization is the escape of literal word-start marks, one word-start mark before the text
        # (before each word of pre-split input) and one for each space (`space_marks`), all undone by decoding:
        # decode(encode(text)) gives back the text.
        backend.normalizer = normalizers.Sequence(
            [
                normalizers.Replace(ESCAPE, ESCAPE + ESCAPED_ESCAPE),
                normalizers.Replace(WORD_START, ESCAPE + ESCAPED_WORD_START),
                normalizers.Prepend(WORD_START),
            ]
        )
        after_fuse = []
        if split_newlines:
            # "a?\nB" -> "a?\n▁B": the next line starts a word; decoding drops the space this adds after the break
            backend.normalizer = normalizers.Sequence([backend.normalizer, normalizers.Replace("\n", "\n" + WORD_START)])
            after_fuse = [decoders.Replace("\n ", "\n")]
        backend.normalizer = normalizers.Sequence([backend.normalizer, space_marks()])
        backend.pre_tokenizer = pre_tokenizers.Sequence(word_splitters(split_punctuation, split_newlines))
        backend.decoder = decoders.Sequence(
            [
                decoders.Replace(WORD_START, " "),
                decoders.ByteFallback(),  # <0xE2><0x82><0xAC> -> "€"
                decoders.Fuse(),
                *after_fuse,
                decoders.Replace(ESCAPE + ESCAPED_WORD_START, WORD_START),  # in this order: see ESCAPE
                decoders.Replace(ESCAPE + ESCAPED_ESCAPE, ESCAPE),
                decoders.Strip(content=" ", left=1, right=0),  # the space added before the first word
            ]
        )
        # The byte tokens are listed as special only so that they get fixed ids; they are made ordinary vocabulary
        # entries below, so that decoding with skip_special_tokens=True still turns them back into text.
        trainer = BpeTrainer(
            vocab_size=vocab_size,
            min_frequency=min_frequency,
            special_tokens=SPECIAL_TOKENS + tags + BYTE_TOKENS,
            show_progress=show_progress,
        )
        backend.train_from_iterator(_strings(texts), trainer=trainer)
        if backend.get_vocab_size() <= reserved:
            raise ValueError("The training texts are empty: no subword could be learned from them.")

        state = json.loads(backend.to_str())
        state["added_tokens"] = [token for token in state["added_tokens"] if token["content"] not in BYTE_TOKENS]
        for token in state["added_tokens"]:
            # ">>de<< Ein Satz": the space after a language tag belongs to the tag, not to the sentence
            token["rstrip"] = token["content"] in tags
        backend = Tokenizer.from_str(json.dumps(state))
        eos_id = backend.token_to_id(EOS)
        backend.post_processor = processors.TemplateProcessing(
            single=f"$A {EOS}", pair=f"$A {EOS} $B {EOS}", special_tokens=[(EOS, eos_id)]
        )
        return cls(
            tokenizer_object=backend,
            pad_token=PAD,
            bos_token=BOS,
            eos_token=EOS,
            unk_token=UNK,
            extra_special_tokens=tags,
            model_max_length=model_max_length,
            clean_up_tokenization_spaces=False,
            split_special_tokens=True,  # "<s>" or ">>de<<" typed in a text is text, not a control token
        )

    @property
    def tgt_lang(self) -> str | None:
        """The target language whose tag (`>>de<<`) starts every encoded source; None for no tag."""
        return self._tgt_lang

    @tgt_lang.setter
    def tgt_lang(self, code: str | None) -> None:
        if code is not None and code not in self.language_tags:
            known = sorted(self.language_tags) or "none (this vocabulary has no language tags)"
            raise ValueError(f"tgt_lang={code!r}: the tokenizer has language tags for {known}.")
        self._tgt_lang = code
        self._switch_to_input_mode()

    # transformers calls these two around `tokenizer(text, text_target=...)`: sources carry the tag, targets not.
    def _switch_to_input_mode(self):
        # (at every call: without a target language there is no tag to look up among the special tokens)
        self._put_first(self.language_tags.get(self._tgt_lang) if self._tgt_lang is not None else None)

    def _switch_to_target_mode(self):
        self._put_first(None)

    def _put_first(self, tag: str | None) -> None:
        if tag == self._template_tag:
            return
        first = f"{tag} " if tag else ""
        special = [(EOS, self.convert_tokens_to_ids(EOS))] + ([(tag, self.convert_tokens_to_ids(tag))] if tag else [])
        self._tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{first}$A {EOS}", pair=f"{first}$A {EOS} $B {EOS}", special_tokens=special
        )
        self._template_tag = tag

    @property
    def language_tags(self) -> dict[str, str]:
        """Language code -> tag token, for the tags this vocabulary has: its special tokens of the form `>>de<<`
        (those the backend holds as special, so that a list of extra special tokens a user sets, which transformers'
        `add_special_tokens` puts in place of the tags, does not take them away)."""
        special = {token.content for token in self.added_tokens_decoder.values() if token.special}
        tags = sorted(token for token in special | set(self.all_special_tokens) if is_language_tag(token))
        return {token[2:-2]: token for token in tags}


# A word's start mark ("▁" before "Smith") is taken off and put back before the word: put first, it takes the place
# of the word's first character in the text instead of the place of the space it replaced, so the word's first token
# spans from the word's first character. A mark that is all of its piece (a run of spaces: "a  b" -> "▁a", "▁", "▁b")
# keeps its space. The pieces, and so the tokens and ids, stay exactly those of the first step alone.
WORD_MARK_BEFORE_TEXT = WORD_START + r"(?=[\s\S])"  # a mark with a character after it in its piece


def word_splitters(split_punctuation: bool, split_newlines: bool) -> list:
    """The pre-tokenizers that cut a text into the pieces BPE segments (see `train_from_texts` for the options)."""
    splitters = [
        # " " -> "▁", and a cut before each "▁": "▁John", "▁Smith"
        pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme="never", split=True),
        *word_start_alignment(),
    ]
    if split_newlines:
        splitters.append(pre_tokenizers.Split(Regex("\r?\n"), behavior="isolated"))
    if split_punctuation:
        splitters.append(pre_tokenizers.Punctuation(behavior="isolated"))
    return splitters


def word_start_alignment() -> list:
    """The two steps that make a word's offsets start at the word and not at the space before it (see above)."""
    return [
        pre_tokenizers.Split(Regex(WORD_MARK_BEFORE_TEXT), behavior="removed"),
        pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme="always", split=False),
    ]


def align_word_starts(backend: Tokenizer) -> bool:
    """Give a tokenizer of this project saved before `word_start_alignment` existed (its offsets covered the space
    before each word) the exact offsets, in place; its pieces, tokens and ids stay the same. Any other pre-tokenizer
    is left as it is. Returns whether it changed."""
    state = json.loads(backend.to_str())
    old = state.get("pre_tokenizer") or {}
    steps = old.get("pretokenizers", []) if old.get("type") == "Sequence" else [old]
    first_step = pre_tokenizers.Metaspace(replacement=WORD_START, prepend_scheme="never", split=True)
    if not steps or steps[0] != json.loads(first_step.__getstate__()):
        return False
    alignment = [json.loads(step.__getstate__()) for step in word_start_alignment()]
    if steps[1:3] == alignment:
        return False
    state["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [steps[0], *alignment, *steps[1:]]}
    backend.pre_tokenizer = Tokenizer.from_str(json.dumps(state)).pre_tokenizer
    return True


def space_marks():
    """The normalizer's last step: each space becomes a word-start mark, as the first pre-tokenizer (Metaspace) would
    make it next, so the pieces and ids are the same. Done here, the normalized text "▁a▁zzzq▁horse" holds a token a
    user added ("zzzq", matched in the normalized text as "▁zzzq", with the mark of the word it is) where it stands as
    a word; transformers adds a user's tokens to be matched there (`normalized=True`)."""
    return normalizers.Replace(" ", WORD_START)


def mark_spaces(backend: Tokenizer) -> bool:
    """Give a tokenizer of this project saved before `space_marks` existed that last normalizer step, in place; its
    pieces, tokens and ids stay the same. Any other normalizer is left as it is. Returns whether it changed."""
    state = json.loads(backend.to_str())
    old = state.get("normalizer") or {}
    space_step = json.loads(space_marks().__getstate__())
    steps = list(flat_steps(old, "normalizers"))
    escape_step = json.loads(normalizers.Replace(ESCAPE, ESCAPE + ESCAPED_ESCAPE).__getstate__())
    if not steps or steps[0] != escape_step or steps[-1] == space_step:
        return False
    state["normalizer"] = {"type": "Sequence", "normalizers": [*steps, space_step]}
    backend.normalizer = Tokenizer.from_str(json.dumps(state)).normalizer
    return True


def flat_steps(step: dict, key: str) -> Iterator[dict]:
    """The steps of a normalizer or pre-tokenizer in its JSON form (`key`: "normalizers"), nested sequences flattened."""
    if step.get("type") == "Sequence":
        for inner in step.get(key, []):
            yield from flat_steps(inner, key)
    elif step:
        yield step


def update_saved_tokenizer(backend: Tokenizer) -> bool:
    """`align_word_starts` and `mark_spaces`, in place: a tokenizer of this project saved before either gets exact
    word offsets and finds the tokens a user adds, with the same pieces, tokens and ids. Returns whether it changed."""
    aligned = align_word_starts(backend)
    marked = mark_spaces(backend)
    return aligned or marked


def update_tokenizer_file(folder: str | Path) -> bool:
    """Rewrite the tokenizer.json of a saved tokenizer folder with `update_saved_tokenizer` (exact offsets, added
    tokens found, the same tokens and ids), leaving its other files alone. Returns whether the file changed.

        python -c "from vaswani.tokenization_vaswani import update_tokenizer_file as u; u('results/x/model')"
    """
    path = Path(folder) / "tokenizer.json"
    check_json_file(path)
    backend = Tokenizer.from_file(str(path))
    if not update_saved_tokenizer(backend):
        return False
    backend.save(str(path), pretty=False)
    return True


def check_tokenizer_files(folder: Path) -> None:
    """Bound the JSON files of a tokenizer folder before anything parses them (`check_json_file`), and the BPE
    model of tokenizer.json before the tokenizers library builds it (`check_bpe_model`); before any of them is
    opened, every entry of the folder is a regular file or a folder (`check_regular_files`: no FIFO, device or
    socket)."""
    check_regular_files(folder)
    for name in TOKENIZER_JSON_FILES:
        if (folder / name).is_file():
            check_json_file(folder / name)
    if (folder / "tokenizer.json").is_file():
        content = check_bpe_model(folder / "tokenizer.json")
        if isinstance(content, dict):
            check_regexes(folder / "tokenizer.json", content)


# The memory the tokenizers library takes to build a tokenizer, per byte of its tokenizer.json (measured: 7.6 GB for a
# file of 149 MB), with this check's own parse of the file included.
BUILD_BYTES_PER_FILE_BYTE = 64


def check_bpe_model(path: Path):
    """Refuse a tokenizer.json that the memory left could not build, or whose BPE merges are not those of its
    vocabulary (a merge joins two tokens of the vocabulary into a third, so there are no more merges than tokens):
    ValueError naming the file. A file of 149 MB (91 merges repeated to 10 million) took 98 s and 7.6 GB to build.
    Returns the file's content, parsed."""
    try:
        from .loading_checks import cpu_memory_available  # absent where a folder carries the tokenizer alone
    except ImportError:
        cpu_memory_available = None
    size = path.stat().st_size
    available = cpu_memory_available() if cpu_memory_available else None
    if available is not None and size * BUILD_BYTES_PER_FILE_BYTE > available:
        raise ValueError(f"{path} ({size:,} bytes) would take about {size * BUILD_BYTES_PER_FILE_BYTE:,} bytes of "
                         f"memory to build, more than the {available:,} available: the file is damaged or hostile, or "
                         "needs a larger machine.")
    try:
        content = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(f"{path} is not valid JSON ({error}): the file is truncated or damaged; save or download the "
                         "tokenizer again.") from None
    model = content.get("model") if isinstance(content, dict) else None
    if not isinstance(model, dict) or model.get("type") != "BPE":
        return content
    vocabulary, merges = model.get("vocab"), model.get("merges")
    if not isinstance(vocabulary, dict) or not isinstance(merges, list):
        raise ValueError(f"{path}: its BPE model has no vocabulary (`vocab`) or no list of `merges`; save or "
                         "download the tokenizer again.")
    if len(merges) > len(vocabulary):
        raise ValueError(f"{path}: its BPE model has {len(merges):,} merges for a vocabulary of {len(vocabulary):,} "
                         "tokens; a merge makes one token of the vocabulary, so there are at most as many. The file "
                         "is damaged or hostile; save or download the tokenizer again.")
    for number, merge in enumerate(merges):
        pair = merge.split(" ", 1) if isinstance(merge, str) else merge
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(part, str) and part in vocabulary
                                                                   for part in pair)
                and pair[0] + pair[1] in vocabulary):
            raise ValueError(f"{path}: BPE merge {number} ({str(merge)[:80]!r}) does not join two tokens of its "
                             "vocabulary into a third. The file is damaged or hostile; save or download the tokenizer "
                             "again.")
    return content


# The parts of a tokenizer.json whose steps may match a regular expression (a `Split` pre-tokenizer, a `Replace`
# normalizer or decoder), run on every text the tokenizer reads or writes.
REGEX_SECTIONS = ("normalizer", "pre_tokenizer", "decoder")
MAX_REGEXES = 64  # more than any tokenizer has (GPT-2's: one; this project's: three)
MAX_REGEX_CHARACTERS = 4096
PROBE_LENGTH = 64  # characters of each probe text: a catastrophic pattern blows up on far fewer (25 for (a+)+$)
PROBE_SECONDS = 1.0  # what all the probes together may take; they take about a millisecond


def check_regexes(path: Path, content: dict) -> None:
    """Refuse a tokenizer.json whose regular expressions (`Split`, `Replace`: `regexes_of`) could take exponential
    time on a short text, before the tokenizer is built: one whose pattern repeats a group that itself repeats
    (`(a+)+$`: star height 2, `nested_repetition`), or whose normalizer, pre-tokenizer or decoder, built on their
    own, fails or takes more than PROBE_SECONDS on a few bounded probe texts made of the patterns' own characters
    (`probe_regexes`). The regular-expression engine of the tokenizers library gives up after a number of steps
    and the library then panics: a 25-character text ended the web demo's request without an answer. ValueError
    naming the file and the pattern."""
    patterns = regexes_of({key: content.get(key) for key in REGEX_SECTIONS})
    if not patterns:
        return
    if len(patterns) > MAX_REGEXES:
        raise ValueError(f"{path}: its steps hold {len(patterns)} regular expressions, more than the {MAX_REGEXES} "
                         "allowed. The file is damaged or hostile; save or download the tokenizer again.")
    for pattern in patterns:
        if len(pattern) > MAX_REGEX_CHARACTERS:
            raise ValueError(f"{path}: a regular expression of {len(pattern):,} characters (at most "
                             f"{MAX_REGEX_CHARACTERS:,} allowed): {pattern[:60]!r}... The file is damaged or hostile.")
        nested = nested_repetition(pattern)
        if nested is not None:
            raise ValueError(f"{path}: the regular expression {pattern[:80]!r} repeats a group that itself repeats "
                             f"({nested[:40]!r}), which can take exponential time on a short text (the tokenizers "
                             "library then panics). Use a tokenizer without it: save or download the tokenizer again.")
    problem = probe_regexes(content, patterns)
    if problem is not None:
        raise ValueError(f"{path}: {problem}; such a tokenizer could not read every text. Use a tokenizer without "
                         "that step: save or download the tokenizer again.")


def regexes_of(value) -> list[str]:
    """Every regular expression (`{"Regex": "..."}`) in a part of a tokenizer.json, in order."""
    found, stack = [], [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("Regex"), str):
                found.append(item["Regex"])
            stack.extend(reversed(list(item.values())))
        elif isinstance(item, list):
            stack.extend(reversed(item))
    return found


_REPEATS = re.compile(r"[*+]|\{(\d*)(,?)(\d*)\}")


def nested_repetition(pattern: str) -> str | None:
    """The first group of `pattern` that is repeated (`*`, `+`, `{n,}`, `{n,m}` with m > 1) and holds a repetition
    itself, as written (`(a+)`); None where there is none. Escapes and character classes are skipped; an atomic
    group (`(?>...)`), which never backtracks into itself, does not count."""
    groups: list[list] = []  # open groups: [start, holds a repetition, atomic]
    index, length = 0, len(pattern)
    while index < length:
        char = pattern[index]
        if char == "\\":
            index += 2
            if pattern[index - 1:index] in ("p", "P", "x", "o") and pattern.startswith("{", index):  # \p{L}
                index = (pattern.find("}", index) + 1) or length
            end = index
        elif char == "[":
            index = _class_end(pattern, index)
            end = index
        elif char == "(":
            groups.append([index, False, pattern.startswith("(?>", index)])
            index += 1
            continue
        elif char == ")" and groups:
            start, holds, atomic = groups.pop()
            index += 1
            repeated = _repetition_at(pattern, index)
            if repeated and holds and not atomic:
                return pattern[start:index]
            if groups and (holds and not atomic or repeated):
                groups[-1][1] = True
            index += repeated[1] if repeated else 0
            continue
        else:
            index += 1
            end = index
        repeated = _repetition_at(pattern, end)
        if repeated and groups:
            groups[-1][1] = True
        index = end + (repeated[1] if repeated else 0)
    return None


def _repetition_at(pattern: str, index: int) -> tuple[bool, int] | None:
    """(True, its length) where a quantifier that repeats more than once starts at `index`; None otherwise."""
    match = _REPEATS.match(pattern, index)
    if match is None:
        return None
    if match.group(0).startswith("{"):
        low, comma, high = match.groups()
        if not low and not comma:
            return None
        if not comma or (high and int(high) <= 1):
            return None if not low or int(low) <= 1 else (True, match.end() - index)
    return True, match.end() - index


def _class_end(pattern: str, index: int) -> int:
    """The index after the character class that starts at `index` (`[...]`, nested classes and escapes inside)."""
    depth, index = 0, index
    while index < len(pattern):
        char = pattern[index]
        if char == "\\":
            index += 2
            continue
        if char == "[":
            depth += 1
            if pattern.startswith("^]", index + 1) or pattern.startswith("]", index + 1):
                index += 2 if pattern[index + 1] == "]" else 3
                continue
        elif char == "]":
            depth -= 1
            if depth == 0:
                return index + 1
        index += 1
    return len(pattern)


def probe_texts(patterns: list[str]) -> list[str]:
    """Short texts on which a pattern that backtracks without end shows it: each character the patterns name
    (letters, digits, spaces, marks), repeated to PROBE_LENGTH, then a character of another kind, and a few mixes."""
    characters = {char for pattern in patterns for char in pattern if char.isprintable() or char.isspace()}
    characters = sorted(characters - set("\\()[]{}|*+?^$.:<>=!,-") | {"a", "1", " ", "\n", "."})[:64]
    texts = []
    for char in characters:
        other = "!" if char.isalnum() else "a"
        texts.append(char * PROBE_LENGTH + other)
    texts += ["a1 " * (PROBE_LENGTH // 3) + "!", "ab" * (PROBE_LENGTH // 2) + "\n", "a." * (PROBE_LENGTH // 2) + "\u2581"]
    return texts


def probe_regexes(content: dict, patterns: list[str]) -> str | None:
    """Run the tokenizer's normalizer, pre-tokenizer and decoder (built alone, around an empty model) on
    `probe_texts`; what went wrong in words, or None. The regular-expression engine bounds each match (the library
    panics past its limit), so a probe ends; a step slower than PROBE_SECONDS in all counts as wrong too."""
    import time

    state = {"version": "1.0", "truncation": None, "padding": None, "added_tokens": [], "post_processor": None,
             **{key: content.get(key) for key in REGEX_SECTIONS},
             "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": None,
                       "end_of_word_suffix": None, "fuse_unk": False, "byte_fallback": False, "vocab": {},
                       "merges": []}}
    try:
        backend = Tokenizer.from_str(json.dumps(state))
    except Exception as error:  # the tokenizers library's own exception: a step it cannot build
        return f"its steps cannot be built ({str(error).splitlines()[0][:200] if str(error) else type(error).__name__})"
    started = time.perf_counter()
    with _panic_report_silenced():
        for text in probe_texts(patterns):
            try:
                normalized = backend.normalizer.normalize_str(text) if backend.normalizer else text
                pieces = backend.pre_tokenizer.pre_tokenize_str(normalized) if backend.pre_tokenizer else [(text, 0)]
                if backend.decoder:
                    backend.decoder.decode([piece for piece, _ in pieces] or [text])
            except (KeyboardInterrupt, SystemExit):
                raise
            except BaseException as error:  # the library's panic (pyo3's PanicException is a BaseException)
                return (f"a regular expression of its steps ({', '.join(repr(p[:40]) for p in patterns)}) fails on "
                        f"the {len(text)}-character text {text[:12]!r}... ({type(error).__name__})")
            if time.perf_counter() - started > PROBE_SECONDS:
                return (f"its regular expressions ({', '.join(repr(p[:40]) for p in patterns)}) took more than "
                        f"{PROBE_SECONDS:g} s on {PROBE_LENGTH}-character texts")
    return None


@contextmanager
def _panic_report_silenced():
    """The process's stderr (file descriptor 2) sent nowhere while the probes run (milliseconds): a panic of the
    tokenizers library writes its report of 40 lines there, where the one line of the refusal is what counts."""
    import os
    import sys

    try:
        sys.stderr.flush()
        saved = os.dup(2)
    except (OSError, ValueError, AttributeError):  # no descriptor 2 (an embedding application)
        yield
        return
    try:
        with open(os.devnull, "wb") as nowhere:
            os.dup2(nowhere.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _strings(texts: Iterable[str]) -> Iterator[str]:
    for text in texts:
        if not isinstance(text, str):
            raise TypeError(f"Tokenizer training texts must be strings, got {type(text).__name__}: {text!r:.80}")
        yield text


__all__ = [
    "VaswaniTokenizer",
    "check_bpe_model",
    "check_regexes",
    "check_tokenizer_files",
    "flat_steps",
    "nested_repetition",
    "space_marks",
    "update_saved_tokenizer",
    "update_tokenizer_file",
    "word_start_alignment",
]
