"""The translation / summarization / text2text pipelines shipped in every checkpoint, token classification through
transformers' pipeline told where the words are, and text classification through transformers' own: in a fresh
process without the package, and in-process with model objects (bad input: test_pipeline_inputs.py). The models are
conftest.py's."""

import ast
import copy
import json
import sys
import threading
import warnings
from pathlib import Path

import pytest
import torch
import transformers

from helpers import PAIRS, run_isolated, spread_weights, tiny_config
from pipeline_helpers import (
    ENTITIES, LABELS, PIPELINE_FILES, REMOTE_CODE, SENTENCE, SOURCES, SPACED, TAG_NAMES, TAGGED, generate_ids,
    generate_texts,
)
from vaswani import VaswaniForConditionalGeneration, VaswaniForTokenClassification, VaswaniTokenizer
from vaswani.pipelines import (
    SummarizationPipeline, Text2TextGenerationPipeline, TokenClassificationPipeline, TranslationPipeline, pipeline,
)


# --- checkpoints carry the pipelines -------------------------------------------------------------------------------


def test_checkpoint_declares_the_tasks_and_carries_the_pipeline_code(checkpoints):
    folder = checkpoints["seq2seq"]
    config = json.loads((folder / "config.json").read_text())
    assert (config["source_lang"], config["target_lang"]) == ("en", "de")
    shipped = folder / "pipeline_vaswani.py"
    for name in PIPELINE_FILES:  # the pipeline file and the module it imports
        assert (folder / name).read_bytes() == (REMOTE_CODE / name).read_bytes()
    classes = {node.name for node in ast.parse(shipped.read_text()).body if isinstance(node, ast.ClassDef)}
    expected = {
        "translation": "TranslationPipeline",
        "summarization": "SummarizationPipeline",
        "text2text-generation": "Text2TextGenerationPipeline",
    }
    for task, class_name in expected.items():
        entry = config["custom_pipelines"][task]
        assert entry["impl"] == f"pipeline_vaswani.{class_name}" and class_name in classes
        assert entry["pt"] == ["AutoModelForSeq2SeqLM"]
    # the classifier's checkpoint carries the code (every checkpoint the project saves) but declares no such task
    assert (checkpoints["classifier"] / "pipeline_vaswani.py").is_file()
    assert json.loads((checkpoints["classifier"] / "config.json").read_text())["custom_pipelines"] == {}
    # the tagger's declares token classification, served by transformers' pipeline told where the words are
    declared = json.loads((checkpoints["tagger"] / "config.json").read_text())["custom_pipelines"]
    assert declared == {"token-classification": {"impl": "pipeline_vaswani.TokenClassificationPipeline",
                                                 "pt": ["AutoModelForTokenClassification"], "type": "text"}}
    assert "TokenClassificationPipeline" in classes


def test_a_classifier_serves_text_classification_only(checkpoints, classifier, tokenizer):
    folder = str(checkpoints["classifier"])
    assert transformers.pipeline("text-classification", model=folder)(SOURCES[0])[0]["label"] in LABELS.values()
    for model in (folder, classifier):
        with pytest.raises(ValueError, match=r"does not serve the 'translation' pipeline: it declares none"):
            pipeline("translation", model=model, tokenizer=tokenizer)
    # transformers itself: the folder declares no translation pipeline, and a classifier object serves none either
    with pytest.raises(ValueError, match=r"\(VaswaniForSequenceClassification\) does not serve the 'translation'"):
        transformers.pipeline("translation", model=folder, trust_remote_code=True)
    with pytest.raises(ValueError, match=r"\(VaswaniForSequenceClassification\) does not serve the 'translation'"):
        transformers.pipeline("translation", model=classifier, tokenizer=tokenizer)


def test_pipeline_files_import_only_the_standard_library_torch_transformers_tokenizers_and_each_other():
    allowed = set(sys.stdlib_module_names) | {"torch", "transformers", "tokenizers"}  # transformers needs tokenizers
    carried = {Path(name).stem for name in PIPELINE_FILES}
    for name in PIPELINE_FILES:
        for node in ast.walk(ast.parse((REMOTE_CODE / name).read_text())):
            if isinstance(node, ast.ImportFrom) and node.level:
                # a file the checkpoint folder holds beside it (transformers copies it with the pipeline file)
                assert node.level == 1 and node.module in carried, f"{name}: from {'.' * node.level}{node.module}"
            elif isinstance(node, ast.ImportFrom):
                assert node.module.split(".")[0] in allowed, f"{name}: {node.module}"
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    assert alias.name.split(".")[0] in allowed, f"{name}: {alias.name}"


@pytest.fixture(scope="module")
def fresh_process(checkpoints) -> tuple[dict, dict]:
    """The standard pipeline calls, then the tagger's, in one fresh process without the package (one interpreter's
    imports, about 5 s here, for the two tests that read it): what each call gave, as JSON."""
    stdout = run_isolated(
        f"""
        import json, warnings
        from transformers import pipeline
        seq2seq, classifier = {str(checkpoints["seq2seq"])!r}, {str(checkpoints["classifier"])!r}
        texts = {SOURCES[:3]!r}
        translator = pipeline("translation", model=seq2seq, trust_remote_code=True)
        summarizer = pipeline("summarization", model=seq2seq, trust_remote_code=True)
        generator = pipeline("text2text-generation", model=seq2seq, trust_remote_code=True)
        labeller = pipeline("text-classification", model=classifier, trust_remote_code=True)
        print(json.dumps({{
            "translations": translator(texts, batch_size=2, num_beams=3, max_new_tokens=20),
            "summary": summarizer({SOURCES[4]!r}, num_beams=3, max_new_tokens=20),
            "generated": generator({SOURCES[4]!r}, num_beams=3, max_new_tokens=20),
            "labels": labeller({SOURCES[0]!r}, top_k=None),
            "direction": [translator.src_lang, translator.tgt_lang, repr(translator)],
            "modules": [type(p).__module__ for p in (translator, summarizer, generator, labeller)],
        }}))
        warnings.simplefilter("always")
        with warnings.catch_warnings(record=True) as caught:
            tag = pipeline("token-classification", model={str(checkpoints["tagger"])!r}, trust_remote_code=True,
                           aggregation_strategy="first")
            entities = tag({SENTENCE!r})
        print(json.dumps({{
            "entities": [[e["entity_group"], e["word"], e["start"], e["end"]] for e in entities],
            "warnings": [str(w.message) for w in caught if "fallback" in str(w.message)],
            "module": type(tag).__module__,
        }}))

        # the notebook pattern: objects loaded through the Auto classes, then transformers.pipeline on them
        from transformers import (AutoModelForSeq2SeqLM, AutoModelForSequenceClassification,
                                  AutoModelForTokenClassification, AutoTokenizer)
        tagger_folder = {str(checkpoints["tagger"])!r}
        model = AutoModelForSeq2SeqLM.from_pretrained(seq2seq, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(seq2seq, trust_remote_code=True)
        built = {{task: pipeline(task, model=model, tokenizer=tokenizer)
                 for task in ("translation", "translation_en_to_de", "summarization", "text2text-generation")}}
        labeller = pipeline("text-classification", tokenizer=tokenizer,
                            model=AutoModelForSequenceClassification.from_pretrained(classifier, trust_remote_code=True))
        with warnings.catch_warnings(record=True) as caught:
            tag = pipeline("ner", aggregation_strategy="first",
                           model=AutoModelForTokenClassification.from_pretrained(tagger_folder, trust_remote_code=True),
                           tokenizer=AutoTokenizer.from_pretrained(tagger_folder, trust_remote_code=True))
            entities = tag({SENTENCE!r})
        print(json.dumps({{
            "outputs": {{task: built[task](texts, batch_size=2, num_beams=3, max_new_tokens=20) for task in built}},
            "labels": labeller({SOURCES[0]!r}, top_k=None),
            "entities": [[e["entity_group"], e["word"], e["start"], e["end"]] for e in entities],
            "warnings": [str(w.message) for w in caught if "fallback" in str(w.message)],
            "modules": {{task: type(built[task]).__module__ + "." + type(built[task]).__name__ for task in built}},
            "tag_module": type(tag).__module__,
            "label_module": type(labeller).__module__,
        }}))
        """
    )
    standard, tagging, from_objects = (json.loads(line) for line in stdout.strip().splitlines()[-3:])
    return standard, tagging, from_objects


def test_standard_pipeline_calls_work_in_a_fresh_process_without_the_package(
    fresh_process, translator, classifier, tokenizer
):  # (the tagger's: test_token_classification_works_in_a_fresh_process_without_the_package)
    texts = SOURCES[:3]
    settings = dict(num_beams=3, max_new_tokens=20)
    expected_translations = generate_texts(translator, tokenizer, texts, **settings)
    expected_summary = generate_texts(translator, tokenizer, [SOURCES[4]], **settings)[0]
    with torch.no_grad():
        probabilities = torch.softmax(classifier(**tokenizer([SOURCES[0]], return_tensors="pt")).logits[0], -1)
    result = fresh_process[0]
    assert result["translations"] == [{"translation_text": text} for text in expected_translations]
    assert result["summary"] == [{"summary_text": expected_summary}]
    assert result["generated"] == [{"generated_text": expected_summary}]
    assert expected_translations[0] == PAIRS[0][1]  # the outputs are real sentences, not a repeated token
    assert result["direction"][:2] == ["en", "de"] and "en -> de" in result["direction"][2]
    # the checkpoint's own copy of the pipeline code, and transformers' own text-classification pipeline
    assert all(module.startswith("transformers_modules.") for module in result["modules"][:3])
    assert result["modules"][3] == "transformers.pipelines.text_classification"
    scores = {entry["label"]: entry["score"] for entry in result["labels"]}
    assert set(scores) == set(LABELS.values())
    for index, label in LABELS.items():
        assert scores[label] == pytest.approx(probabilities[index].item(), abs=1e-5)


# --- token classification: the words' spans -------------------------------------------------------------------------


def entity_spans(entities) -> list[tuple]:
    return [(entity["entity_group"], entity["word"], entity["start"], entity["end"]) for entity in entities]


def tag_without_warnings(tag, *args, **kwargs):
    """What `tag(*args, **kwargs)` returns, after checking that it warned of nothing."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = tag(*args, **kwargs)
    assert [str(warning.message) for warning in caught] == []
    return result


@pytest.mark.parametrize("strategy", ["simple", "first", "average", "max"])
def test_token_classification_gives_each_entity_the_span_of_its_words(tagger, tagger_tokenizer, strategy):
    tag = pipeline("token-classification", model=tagger, tokenizer=tagger_tokenizer, aggregation_strategy=strategy)
    assert type(tag) is TokenClassificationPipeline
    # no "Tokenizer does not support real words, using fallback heuristic": the words are known
    assert entity_spans(tag_without_warnings(tag, SENTENCE)) == ENTITIES
    # every word, the "O" ones too: "Berlin" and "." are two words, as in CoNLL-2003
    every_word = tag_without_warnings(tag, SENTENCE, ignore_labels=[])
    assert [(entity["start"], entity["end"]) for entity in every_word] == [(0, 10), (11, 19), (20, 26), (26, 27)]
    # pre-split words: spans in the words joined by spaces, as transformers gives them
    [split] = tag_without_warnings(tag, TAGGED[0][0].split(), is_split_into_words=True)
    assert entity_spans(split) == [("PER", "John Smith", 0, 10), ("LOC", "Berlin", 20, 26)]


@pytest.fixture(scope="module")
def table_tagger() -> tuple[VaswaniForTokenClassification, VaswaniTokenizer]:
    """An untrained tagger made to tag by a table of token ids, and its tokenizer, which knows each word of TAGGED
    whole: the token of each word of TAGGED[0] gets the word's tag, every other token O (a lone "▁" too), so that
    what it says of a text it was not fitted to is known."""
    texts = SOURCES + [text for text, _ in TAGGED]
    tokenizer = VaswaniTokenizer.train_from_texts(texts * 3, vocab_size=600, min_frequency=1, split_punctuation=True)
    config = tiny_config(vocab_size=len(tokenizer), num_labels=len(TAG_NAMES), id2label=dict(enumerate(TAG_NAMES)),
                         label2id={name: index for index, name in enumerate(TAG_NAMES)})
    model = VaswaniForTokenClassification(config).eval()
    table = torch.zeros(len(tokenizer), dtype=torch.long)
    for word, tag in zip(*(part.split() for part in TAGGED[0])):
        *_, piece = tokenizer([word], is_split_into_words=True, add_special_tokens=False)["input_ids"]  # "." is "▁", "."
        table[piece] = TAG_NAMES.index(tag)

    def by_table(module, args, kwargs, output):
        output.logits = torch.nn.functional.one_hot(table[kwargs["input_ids"]], len(TAG_NAMES)).float() * 10
        return output

    model.register_forward_hook(by_table, with_kwargs=True)
    return model, tokenizer


@pytest.mark.parametrize("strategy", ["simple", "first", "average", "max"])
def test_tokens_that_stand_for_spaces_belong_to_no_entity(table_tagger, strategy):
    model, tokenizer = table_tagger
    tag = pipeline("token-classification", model=model, tokenizer=tokenizer, aggregation_strategy=strategy)
    assert entity_spans(tag_without_warnings(tag, SENTENCE)) == ENTITIES
    spaced = "  John  Smith lives in   Berlin . "  # each space but one before a word is a token ("▁") of its own
    assert "\u2581" in tokenizer.convert_ids_to_tokens(tokenizer(spaced)["input_ids"])
    assert entity_spans(tag_without_warnings(tag, spaced)) == [("PER", "John  Smith", 2, 13), ("LOC", "Berlin", 25, 31)]


@pytest.mark.parametrize("task", ["token-classification", "ner"])
def test_transformers_pipeline_on_a_tagger_object_is_this_projects_pipeline(tagger, tagger_tokenizer, task):
    tag = transformers.pipeline(task, model=tagger, tokenizer=tagger_tokenizer, aggregation_strategy="first")
    assert type(tag) is TokenClassificationPipeline
    assert entity_spans(tag_without_warnings(tag, SENTENCE)) == ENTITIES


def test_other_projects_models_get_what_transformers_gives_them(tagger, tagger_tokenizer):
    """The tasks registered for this project's models leave every other model as transformers serves it: its own
    token-classification pipeline, and its KeyError for the tasks transformers 5 removed."""
    bert_config = transformers.BertConfig(vocab_size=len(tagger_tokenizer), hidden_size=16, num_hidden_layers=1,
                                          num_attention_heads=2, intermediate_size=32, num_labels=len(TAG_NAMES))
    bert = transformers.BertForTokenClassification(bert_config).eval()
    assert type(tagger).__name__ == "VaswaniForTokenClassification"  # (built: the tasks are registered)
    tag = transformers.pipeline("token-classification", model=bert, tokenizer=tagger_tokenizer)
    assert type(tag) is transformers.TokenClassificationPipeline
    bart_config = transformers.BartConfig(vocab_size=len(tagger_tokenizer), d_model=16, encoder_layers=1,
                                          decoder_layers=1, encoder_attention_heads=2, decoder_attention_heads=2,
                                          encoder_ffn_dim=32, decoder_ffn_dim=32, max_position_embeddings=64)
    bart = transformers.BartForConditionalGeneration(bart_config).eval()
    for task in ("translation", "summarization", "text2text-generation"):
        with pytest.raises(KeyError, match=f"The task {task} has been removed from transformers"):
            transformers.pipeline(task, model=bart, tokenizer=tagger_tokenizer)


def test_token_classification_works_in_a_fresh_process_without_the_package(fresh_process):
    result = fresh_process[1]
    assert [tuple(entity) for entity in result["entities"]] == ENTITIES
    assert result["warnings"] == [] and result["module"].startswith("transformers_modules.")


def test_transformers_pipeline_from_model_objects_in_a_fresh_process_without_the_package(
    fresh_process, translator, tokenizer
):
    """`transformers.pipeline(task, model=<object>, tokenizer=<object>)` on objects loaded with trust_remote_code, where
    only the checkpoints' code exists: the checkpoint's own pipeline classes, the outputs of generate."""
    result = fresh_process[2]
    expected = [{"translation_text": text}
                for text in generate_texts(translator, tokenizer, SOURCES[:3], num_beams=3, max_new_tokens=20)]
    keys = {"translation": "translation_text", "translation_en_to_de": "translation_text",
            "summarization": "summary_text", "text2text-generation": "generated_text"}
    classes = {"translation": "TranslationPipeline", "translation_en_to_de": "TranslationPipeline",
               "summarization": "SummarizationPipeline", "text2text-generation": "Text2TextGenerationPipeline"}
    for task, key in keys.items():
        assert result["outputs"][task] == [{key: entry["translation_text"]} for entry in expected], task
        assert result["modules"][task].startswith("transformers_modules.")
        assert result["modules"][task].endswith(f".pipeline_vaswani.{classes[task]}")
    assert [tuple(entity) for entity in result["entities"]] == ENTITIES  # "ner", the alias, with exact words
    assert result["warnings"] == [] and result["tag_module"].startswith("transformers_modules.")
    assert result["label_module"] == "transformers.pipelines.text_classification"
    assert {entry["label"] for entry in result["labels"]} == set(LABELS.values())


# --- in-process use -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("make_pipeline", [pipeline, transformers.pipeline], ids=["vaswani", "transformers"])
def test_in_process_pipeline_with_a_model_object(translator, classifier, tokenizer, tmp_path, make_pipeline):
    expected = generate_texts(translator, tokenizer, SOURCES[:2], num_beams=2, max_new_tokens=20)
    saved_entries = json.dumps(translator.config.custom_pipelines, sort_keys=True)

    translate = make_pipeline("translation", model=translator, tokenizer=tokenizer)
    assert type(translate) is TranslationPipeline
    assert translate(SOURCES[:2], num_beams=2, max_new_tokens=20) == [{"translation_text": t} for t in expected]
    for task, pipeline_class, key in (("summarization", SummarizationPipeline, "summary_text"),
                                      ("text2text-generation", Text2TextGenerationPipeline, "generated_text"),
                                      ("translation_en_to_de", TranslationPipeline, "translation_text")):
        built = make_pipeline(task, model=translator, tokenizer=tokenizer, num_beams=2, max_new_tokens=20)
        assert type(built) is pipeline_class
        assert built(SOURCES[0]) == [{key: expected[0]}]
    again = make_pipeline("translation", model=translator, tokenizer=tokenizer, num_beams=2, max_new_tokens=20)
    assert again(SOURCES[:2]) == [{"translation_text": t} for t in expected]  # generation settings given at init
    direct = TranslationPipeline(model=translator, tokenizer=tokenizer)
    assert direct(SOURCES[0], num_beams=2, max_new_tokens=20) == [{"translation_text": expected[0]}]

    # transformers rewrites the config entry of the task it resolves: the model's own config is left untouched
    assert json.dumps(translator.config.custom_pipelines, sort_keys=True) == saved_entries
    translator.save_pretrained(tmp_path)

    labeller = make_pipeline("text-classification", model=classifier, tokenizer=tokenizer)
    assert type(labeller) is transformers.TextClassificationPipeline
    assert labeller(SOURCES[0])[0]["label"] in LABELS.values()


def test_in_process_pipeline_from_a_folder_needs_no_remote_code(checkpoints, translator, tokenizer):
    expected = generate_texts(translator, tokenizer, [SOURCES[1]], max_new_tokens=20)
    for task, pipeline_class, key in (
        ("translation", TranslationPipeline, "translation_text"),
        ("summarization", SummarizationPipeline, "summary_text"),
        ("text2text-generation", Text2TextGenerationPipeline, "generated_text"),
    ):
        pipe = pipeline(task, model=str(checkpoints["seq2seq"]))
        assert type(pipe) is pipeline_class
        assert pipe(SOURCES[1], max_new_tokens=20) == [{key: expected[0]}]


# --- what the pipelines return --------------------------------------------------------------------------------------


def test_generation_arguments_reach_generate(translator, tokenizer):
    translate = TranslationPipeline(model=translator, tokenizer=tokenizer)
    settings = dict(num_beams=4, num_return_sequences=2, length_penalty=0.6, max_new_tokens=12)
    result = translate(SOURCES[2], return_tensors=True, **settings)
    assert [entry["translation_token_ids"].tolist() for entry in result] == generate_ids(
        translator, tokenizer, SOURCES[2], **settings
    )
    short = translate(SOURCES[2], max_new_tokens=3, return_tensors=True)[0]["translation_token_ids"]
    assert len(short) == 4  # the start token and three new ones
    several = translate(SOURCES[:2], num_beams=2, num_return_sequences=2, max_new_tokens=12)
    assert [len(entries) for entries in several] == [2, 2]  # a list of lists, as in transformers 4.x


def test_batching_gives_the_same_results_as_one_at_a_time(translator, tokenizer):
    translate = TranslationPipeline(model=translator, tokenizer=tokenizer)
    texts = SOURCES[:7]
    one_by_one = translate(texts, return_tensors=True, return_text=True)
    batched = translate(texts, batch_size=4, return_tensors=True, return_text=True)
    assert [entry["translation_text"] for entry in batched] == [entry["translation_text"] for entry in one_by_one]
    for a, b in zip(batched, one_by_one):
        assert torch.equal(a["translation_token_ids"], b["translation_token_ids"])
    assert [entry["translation_text"] for entry in batched] == [target for _, target in PAIRS[:7]]


def test_return_text_return_tensors_and_clean_up_tokenization_spaces(translator, tokenizer):
    # transformers 5 skips the clean-up for BPE tokenizers unless they opt in; this copy opts in, to show that the
    # pipeline passes the setting on to `decode`
    tokenizer = copy.deepcopy(tokenizer)
    tokenizer.clean_up_tokenization_spaces_for_bpe_even_though_it_will_corrupt_output = True
    translate = TranslationPipeline(model=translator, tokenizer=tokenizer)
    [text_only] = translate(SPACED[0])
    assert text_only == {"translation_text": SPACED[1]}
    [tensors_only] = translate(SPACED[0], return_tensors=True)
    assert set(tensors_only) == {"translation_token_ids"}
    assert tokenizer.decode(tensors_only["translation_token_ids"], skip_special_tokens=True) == SPACED[1]
    [both] = translate(SPACED[0], return_tensors=True, return_text=True)
    assert set(both) == {"translation_text", "translation_token_ids"}
    assert translate(SPACED[0], clean_up_tokenization_spaces=True) == [{"translation_text": "Wo ist der Bahnhof?"}]
    assert translate(SPACED[0], clean_up_tokenization_spaces=False) == [{"translation_text": SPACED[1]}]
    with pytest.raises(ValueError, match="return_tensors=True"):
        translate(SPACED[0], return_text=False)


def test_summarization_and_text2text_answer_with_their_keys(translator, tokenizer):
    summarize = SummarizationPipeline(model=translator, tokenizer=tokenizer)
    generate = Text2TextGenerationPipeline(model=translator, tokenizer=tokenizer)
    expected = generate_texts(translator, tokenizer, SOURCES[:2], max_new_tokens=20)
    assert summarize(SOURCES[:2], max_new_tokens=20) == [{"summary_text": text} for text in expected]
    assert generate(SOURCES[0], max_new_tokens=20) == [{"generated_text": expected[0]}]
    assert summarize.task == "summarization" and generate.task == "text2text-generation"


# --- translation direction -----------------------------------------------------------------------------------------


def test_translation_direction_is_shown_and_enforced(translator, tokenizer):
    translate = TranslationPipeline(model=translator, tokenizer=tokenizer)
    assert (translate.src_lang, translate.tgt_lang) == ("en", "de")
    assert "translating en -> de" in repr(translate)
    expected = translate(SOURCES[0])
    assert translate(SOURCES[0], src_lang="en", tgt_lang="de") == expected
    with pytest.raises(ValueError, match=r"src_lang='fr'.*en -> de"):
        translate(SOURCES[0], src_lang="fr")
    with pytest.raises(ValueError, match=r"tgt_lang='fr'.*en -> de"):
        translate(SOURCES[0], tgt_lang="fr")
    with pytest.raises(ValueError, match=r"src_lang='fr'"):
        TranslationPipeline(model=translator, tokenizer=tokenizer, task="translation_fr_to_de")


def test_target_language_tag_is_put_before_the_source():
    texts = [text for pair in PAIRS for text in pair]
    tagged = VaswaniTokenizer.train_from_texts(texts, vocab_size=400, min_frequency=1, language_codes=["de", "fr"])
    model = spread_weights(VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tagged), source_lang="en")))
    translate = TranslationPipeline(model=model.eval(), tokenizer=tagged)
    inputs = translate.preprocess(SOURCES[0], tgt_lang="fr")["input_ids"][0].tolist()
    assert inputs[0] == tagged.convert_tokens_to_ids(">>fr<<")
    tagged.tgt_lang = None
    assert inputs[1:] == tagged(SOURCES[0])["input_ids"]
    # a tag typed into the text is text: the tag given is the one read
    assert translate.preprocess(f">>de<< {SOURCES[0]}", tgt_lang="fr")["input_ids"][0].tolist()[:2] == [
        tagged.convert_tokens_to_ids(">>fr<<"), tagged.convert_tokens_to_ids("\u2581"),
    ]
    tagged.tgt_lang = "fr"
    expected = generate_ids(model, tagged, SOURCES[0], max_new_tokens=6)
    assert translate(SOURCES[0], tgt_lang="fr", max_new_tokens=6, return_tensors=True)[0][
        "translation_token_ids"
    ].tolist() == expected[0]
    with pytest.raises(ValueError, match=r"tgt_lang='es'.*\['de', 'fr'\]"):
        translate(SOURCES[0], tgt_lang="es")


def test_threads_translating_into_different_languages_each_get_their_own_tag(one_thread):
    """One pipeline shared by threads, each asking for another target language: each call's input reaches the model
    with its own language's tag. The threads meet inside the tokenizer (a barrier in its encoding step), so every
    call has picked its language before any encodes: a tag kept on the shared tokenizer would be the last thread's
    for all of them."""
    codes = ["de", "fr", "es", "it"]
    texts = [text for pair in PAIRS for text in pair]
    tagged = VaswaniTokenizer.train_from_texts(texts, vocab_size=400, min_frequency=1, language_codes=codes)
    model = spread_weights(VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tagged), source_lang="en")))
    translate = TranslationPipeline(model=model.eval(), tokenizer=tagged)

    given = {}  # thread name -> the input ids of each of its calls, as the model received them
    generate = model.generate

    def recording_generate(*args, input_ids, **kwargs):
        given.setdefault(threading.current_thread().name, []).append(input_ids[0].tolist())
        return generate(*args, input_ids=input_ids, **kwargs)

    meeting = threading.Barrier(len(codes), timeout=60)
    encode = tagged._encode_plus

    def encode_together(*args, **kwargs):
        meeting.wait()
        return encode(*args, **kwargs)

    model.generate, tagged._encode_plus = recording_generate, encode_together
    errors = []

    def translate_all(code):
        try:
            for source in SOURCES[:3]:
                translate(source, tgt_lang=code, max_new_tokens=2)
        except Exception as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=translate_all, args=(code,), name=code) for code in codes]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    untagged = [encode(source)["input_ids"] for source in SOURCES[:3]]
    for code in codes:
        tag = tagged.convert_tokens_to_ids(f">>{code}<<")
        assert given[code] == [[tag] + ids for ids in untagged], code


def test_eight_threads_sharing_a_pipeline_on_the_default_cpu_path_each_get_their_own_translations(
    one_thread, monkeypatch
):
    """Eight threads share one pipeline whose model decodes on the CPU path (the default), each thread asking for
    another target language in turn: every call gives what transformers' loop gives for its own language alone."""
    import vaswani.remote_code.cpu_decoding as cpu_decoding

    codes = ["de", "fr", "es", "it"]
    texts = [text for pair in PAIRS for text in pair]
    tagged = VaswaniTokenizer.train_from_texts(texts, vocab_size=400, min_frequency=1, language_codes=codes)
    torch.manual_seed(0)
    model = spread_weights(VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tagged), source_lang="en")))
    translate = transformers.pipeline("translation", model=model.eval(), tokenizer=tagged)
    settings = {"num_beams": 2, "max_new_tokens": 8}
    expected = {(code, source): translate(source, tgt_lang=code, cpu_decoding=False, **settings)
                for code in codes for source in SOURCES[:3]}
    searches = []
    search = cpu_decoding.search
    monkeypatch.setattr(cpu_decoding, "search", lambda *args: searches.append(1) or search(*args))
    start, results, errors = threading.Barrier(8, timeout=60), {}, []

    def translate_all(index):
        try:
            start.wait()
            for round_ in range(3):
                code = codes[(index + round_) % len(codes)]
                for source in SOURCES[:3]:
                    results[(index, round_, source)] = (code, translate(source, tgt_lang=code, **settings))
        except Exception as error:  # reported by the main thread
            errors.append(error)

    threads = [threading.Thread(target=translate_all, args=(index,)) for index in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors
    assert len(results) == 8 * 3 * 3 and len(searches) == len(results)  # every call on the CPU path
    for (_, _, source), (code, output) in results.items():
        assert output == expected[(code, source)], (code, source)


def test_a_tokenizer_larger_than_the_models_embedding_table_is_refused(translator, tokenizer):
    """Ids past the embedding table would end in an IndexError inside the model on the first text that uses one."""
    small = VaswaniForConditionalGeneration(tiny_config(vocab_size=len(tokenizer) - 1)).eval()
    with pytest.raises(ValueError, match=rf"tokenizer has {len(tokenizer):,} tokens but the model's embedding table "
                                         rf"has {len(tokenizer) - 1:,} rows"):
        TranslationPipeline(model=small, tokenizer=tokenizer)
