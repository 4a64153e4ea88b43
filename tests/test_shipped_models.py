"""The trained models the project ships (results/*/model, the `model` of a recipe in scripts/configs/recipes.yaml):
complete, safe to load and within the size budget, and still producing what their results files say.

These tests run the real weights, so a change to modeling, tokenization or generation that alters a trained model's
outputs fails here, even where it is self-consistent on the tiny models the other tests train. The expected figures
are the slice results files the recipes' commands write from the shipped folders (`evaluation_results_first*.json`);
after a deliberate change of outputs, replace the models as scripts/serving.md says ("Replacing a shipped model")."""

import json
import re
from pathlib import Path

import pytest
import sacrebleu
import yaml
from safetensors import safe_open
from tokenizers import Tokenizer
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

import vaswani
from vaswani.remote_code.modeling_vaswani import code_files_to_ship
from vaswani.remote_code.tokenization_vaswani import update_saved_tokenizer
from helpers import REPO, SHARED_DATA, as_saved_without_word_alignment, load_script, needs_shared_data, run_isolated


demo = load_script("demo")
evaluate_model = load_script("evaluate_model")


SIZE_BUDGET_BYTES = 80_000_000  # the whole results/ folder, shipped models included: a clone stays small
REQUIRED_FILES = {
    "README.md", "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
    "configuration_vaswani.py", "modeling_vaswani.py", "tokenization_vaswani.py", "pipeline_vaswani.py", "vocabulary.py",
}
GENERATING_FILES = {"generation_config.json"}  # the decoding the results were scored with: generating models only
PICKLE_SUFFIXES = {".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt"}
BLEU_TOLERANCE = 0.5

# The slice evaluation of each shipped model: the arguments of its recipe's evaluate_model.py line (recipes.yaml),
# with the data read from ../shared/data, and the results file that line wrote from the committed folder.
EN_DE = REPO / "results" / "multi30k_en_de"
TRANSLATION_SLICE = [
    "--task", "translation", "--dataset_label", "bentrevett/multi30k", "--split", "test_2016_flickr",
    "--max_eval_samples", "100", "--num_beams", "5", "--length_penalty", "1.0", "--max_new_tokens", "80",
    "--batch_size", "32",
]
SLICES = {
    "Multi30k en->de": (
        ("--test_file", "multi30k/test_2016_flickr.jsonl"),
        [*TRANSLATION_SLICE, "--source_column", "en", "--target_column", "de"],
        EN_DE / "evaluation_results_first100.json",
    ),
    "Multi30k de->en": (
        ("--test_file", "multi30k/test_2016_flickr.jsonl"),
        [*TRANSLATION_SLICE, "--source_column", "de", "--target_column", "en"],
        REPO / "results" / "multi30k_de_en" / "evaluation_results_first100.json",
    ),
    "SAMSum": (
        ("--validation_file", "samsum/validation.jsonl"),
        ["--task", "summarization", "--dataset_label", "knkarthick/samsum", "--split", "validation",
         "--max_eval_samples", "50", "--num_beams", "4", "--length_penalty", "1.5", "--no_repeat_ngram_size", "3",
         "--max_new_tokens", "64", "--batch_size", "16"],
        REPO / "results" / "samsum" / "evaluation_results_first50.json",
    ),
    "SST-2": (
        ("--validation_file", "sst2/validation.jsonl"),
        ["--task", "text-classification", "--dataset_label", "stanfordnlp/sst2", "--max_eval_samples", "300",
         "--batch_size", "64"],
        REPO / "results" / "sst2" / "evaluation_results_first300.json",
    ),
    "CoNLL-2003": (
        ("--validation_file", "conll2003/validation.jsonl"),
        ["--task", "token-classification", "--dataset_label", "eriktks/conll2003", "--max_eval_samples", "300",
         "--batch_size", "64"],
        REPO / "results" / "conll2003" / "evaluation_results_first300.json",
    ),
}
TAGGER = REPO / "results" / "conll2003"


def shipped_recipes() -> dict[str, Path]:
    recipes = yaml.safe_load((REPO / "scripts" / "configs" / "recipes.yaml").read_text(encoding="utf-8"))["recipes"]
    return {recipe["name"]: REPO / recipe["model"] for recipe in recipes if recipe.get("model")}


SHIPPED = shipped_recipes()


def metric_value(results_file: Path, kind: str) -> float:
    results = json.loads(results_file.read_text(encoding="utf-8"))
    return next(metric["value"] for metric in results["metrics"] if metric["type"] == kind)


def first_pairs(count: int, source: str, target: str) -> tuple[list[str], list[str]]:
    lines = (SHARED_DATA / "multi30k" / "test_2016_flickr.jsonl").read_text(encoding="utf-8").splitlines()[:count]
    rows = [json.loads(line) for line in lines]
    return [row[source] for row in rows], [row[target] for row in rows]


def test_a_model_of_every_task_is_shipped_and_checked():
    assert {"Multi30k en->de", "Multi30k de->en", "SAMSum", "SST-2", "CoNLL-2003"} <= set(SHIPPED)
    assert set(SHIPPED) <= set(SLICES), "every shipped model needs its slice check here"


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_folder_is_complete_fp32_and_free_of_pickles(name):
    folder = SHIPPED[name]
    files = {path.name for path in folder.iterdir()}
    [architecture] = json.loads((folder / "config.json").read_text(encoding="utf-8"))["architectures"]
    required = REQUIRED_FILES | (GENERATING_FILES if architecture.endswith("ForConditionalGeneration") else set())
    assert required <= files, f"{folder} lacks {sorted(required - files)}"
    assert not {Path(file).suffix for file in files} & PICKLE_SUFFIXES, f"{folder} holds a pickle: {sorted(files)}"
    with safe_open(folder / "model.safetensors", framework="pt") as weights:
        dtypes = {weights.get_slice(key).get_dtype() for key in weights.keys()}
    assert dtypes == {"F32"}  # fp32, so that the results files are reproduced exactly
    card = (folder / "README.md").read_text(encoding="utf-8")
    assert f"Made by the recipe **{name}**" in card
    assert re.search(r"commit `[0-9a-f]{40}`", card), "the card names the commit of the code"
    assert f"--output_dir {folder.relative_to(REPO).as_posix()}" in card  # the command that wrote this folder


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_folder_carries_the_packages_code_and_tokenizes_text_as_text(name):
    """What `trust_remote_code=True` runs is this package's code (fixes reach the shipped models), and the shipped
    tokenizer keeps the round-trip promise for text that looks like its own markup."""
    folder = SHIPPED[name]
    # every file of the package's remote_code/ folder (the config and model files among them), and no other
    carried = {path.name: path for path in code_files_to_ship()}
    assert {"configuration_vaswani.py", "modeling_vaswani.py", "pipeline_vaswani.py"} <= set(carried)
    assert sorted(path.name for path in folder.glob("*.py")) == sorted(carried)
    for name, source in carried.items():
        assert (folder / name).read_bytes() == source.read_bytes(), f"{folder / name} is stale"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    for text in ["<s> A man </s> <unk><pad>", ">>de<< a\u2581b \u2581", "\ue000\u2581\ue001\ue000\ue002"]:
        ids = tokenizer(text)["input_ids"]
        assert not set(ids[:-1]) & set(tokenizer.all_special_ids)
        assert tokenizer.decode(ids, skip_special_tokens=True) == text


# Real text for the shipped tokenizers, whatever data is at hand; the shared data adds its first rows.
REAL_TEXTS = [
    "John Smith lives in Berlin.", "A little girl in a pink dress is climbing the stairs.",
    "Ein kleines Mädchen in einem rosa Kleid klettert die Treppe hinauf.", "Zwei Männer spielen am Strand Fußball.",
    "Amanda: I baked  cookies. Do you want some?\nJerry: Sure!\nAmanda: I'll bring you tomorrow :-)",
    "Hannah: Hey, do you have Betty's number?\r\nAmanda: Lemme check\n\nAmanda: Sorry, can't find it. \U0001F642",
    "  two leading spaces, (U.S.) don't, 3.5! \t tab", "",
]


def real_texts() -> list[str]:
    texts = list(REAL_TEXTS)
    if SHARED_DATA.is_dir():
        for name, columns, count in (("multi30k/test_2016_flickr.jsonl", ("en", "de"), 1000),
                                     ("samsum/validation.jsonl", ("document", "summary"), 200)):
            lines = (SHARED_DATA / name).read_text(encoding="utf-8").splitlines()[:count]
            texts += [json.loads(line)[column] for line in lines for column in columns]
    return texts


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_a_shipped_tokenizer_gives_word_offsets_and_the_ids_it_was_trained_with(name):
    """Each word's offsets start at the word, not at the space before it, and a token a user adds is used (the fixes
    `update_tokenizer_file` brings to a tokenizer saved before them), in the file itself (for users of the
    `tokenizers` library alone) and through the folder's own code; the ids are those the model was trained on: the
    same as those of the tokenizer as it was learned."""
    saved = Tokenizer.from_file(str(SHIPPED[name] / "tokenizer.json"))
    assert not update_saved_tokenizer(saved), "tokenizer.json predates the offset fixes: update_tokenizer_file(folder)"
    texts = real_texts()
    as_learned = as_saved_without_word_alignment(saved)
    assert [encoding.ids for encoding in saved.encode_batch(texts)] == [
        encoding.ids for encoding in as_learned.encode_batch(texts)
    ]
    tokenizer = AutoTokenizer.from_pretrained(SHIPPED[name], trust_remote_code=True)
    encoding = tokenizer("John Smith lives in Berlin.", return_offsets_mapping=True)
    tokens = tokenizer.convert_ids_to_tokens(encoding["input_ids"])
    assert [start for token, (start, _) in zip(tokens, encoding["offset_mapping"])
            if token.startswith("\u2581")] == [0, 5, 11, 17, 20]
    assert tokenizer.add_tokens(["zzzq"]) == 1 and len(tokenizer) - 1 in tokenizer("a zzzq horse")["input_ids"]


def test_the_results_folder_fits_the_size_budget():
    size = sum(path.stat().st_size for path in (REPO / "results").rglob("*") if path.is_file())
    assert size < SIZE_BUDGET_BYTES, f"results/ takes {size:,} bytes; the budget is {SIZE_BUDGET_BYTES:,}"


@needs_shared_data
@pytest.mark.parametrize("name", sorted(SLICES))
def test_evaluate_model_reproduces_the_committed_slice_results_exactly(name, tmp_path):
    (data_option, data), arguments, expected_file = SLICES[name]
    output_file = tmp_path / "results.json"
    evaluate_model.main([
        "--model", str(SHIPPED[name]), data_option, str(SHARED_DATA / data), *arguments,
        "--output_file", str(output_file),
    ])
    produced, expected = (json.loads(path.read_text(encoding="utf-8")) for path in (output_file, expected_file))
    assert produced["dataset"] == expected["dataset"] and produced["decoding"] == expected["decoding"]
    assert produced["metrics"] == expected["metrics"]


@needs_shared_data
def test_the_en_de_model_loaded_with_the_auto_classes_translates_to_the_recorded_bleu():
    # as a user with the package installed loads it: the package's own classes, generate() directly
    model = AutoModelForSeq2SeqLM.from_pretrained(EN_DE / "model").eval()
    tokenizer = AutoTokenizer.from_pretrained(EN_DE / "model")
    assert type(model) is vaswani.VaswaniForConditionalGeneration
    sources, references = first_pairs(100, "en", "de")
    translations = []
    for start in range(0, len(sources), 50):
        inputs = tokenizer(sources[start : start + 50], padding=True, return_tensors="pt")
        output_ids = model.generate(**inputs, num_beams=5, length_penalty=1.0, max_new_tokens=80)
        translations += tokenizer.batch_decode(output_ids, skip_special_tokens=True)
    bleu = sacrebleu.corpus_bleu(translations, [references]).score
    expected = metric_value(EN_DE / "evaluation_results_first100.json", "sacrebleu")
    assert abs(bleu - expected) <= BLEU_TOLERANCE, f"sacreBLEU {bleu:.2f}; the results file says {expected}"


@needs_shared_data
def test_the_en_de_model_translates_to_the_recorded_bleu_in_a_process_without_the_package():
    sources, references = first_pairs(100, "en", "de")
    stdout = run_isolated(
        f"""
        import json, sacrebleu
        from transformers import pipeline
        translator = pipeline("translation", model={str(EN_DE / "model")!r}, trust_remote_code=True)
        assert type(translator.model).__module__.startswith("transformers_modules"), type(translator.model)
        outputs = translator({sources!r}, batch_size=32, num_beams=5, length_penalty=1.0, max_new_tokens=80)
        print(json.dumps(sacrebleu.corpus_bleu([o["translation_text"] for o in outputs], [{references!r}]).score))
        """
    )
    bleu = json.loads(stdout.strip().splitlines()[-1])
    expected = metric_value(EN_DE / "evaluation_results_first100.json", "sacrebleu")
    assert abs(bleu - expected) <= BLEU_TOLERANCE, f"sacreBLEU {bleu:.2f}; the results file says {expected}"


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_full_results_file_and_the_slice_come_from_the_same_decoding(name):
    recipe_results = json.loads((SHIPPED[name].parent / "evaluation_results.json").read_text(encoding="utf-8"))
    slice_results = json.loads(SLICES[name][2].read_text(encoding="utf-8"))
    assert slice_results["decoding"] == recipe_results["decoding"]
    assert slice_results["dataset"]["split"] == recipe_results["dataset"]["split"]
    assert slice_results["dataset"]["num_examples"] < recipe_results["dataset"]["num_examples"]


def test_the_readme_first_command_translates_real_sentences_and_draws_the_attention(tmp_path):
    pytest.importorskip("matplotlib", reason="the plot extra is not installed: pip install -e '.[plot]'")
    picture = tmp_path / "attention.png"
    translations = demo.main(["--output_file", str(picture)])
    # what the README shows under its first command, from the shipped en->de model
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    for source, translation in zip(demo.SENTENCES, translations):
        assert f"{source}\n  -> {translation}\n" in readme
    assert picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    matrix = json.loads(picture.with_suffix(".json").read_text(encoding="utf-8"))
    assert matrix["source_text"] == demo.SENTENCES[0] and matrix["translation"] == translations[0]
    assert len(matrix["weights"]) == len(matrix["target_tokens"])
    assert all(abs(sum(row) - 1) < 1e-4 for row in matrix["weights"])  # each row a distribution over the source



TAGGING_CALL = re.compile(
    r'tagger = pipeline\("token-classification", model="results/conll2003/model".*?```\n```text\n(.*?)```', re.S)


def test_the_readme_tagging_call_gives_the_entities_it_shows():
    """The README's tagging example, run on the shipped tagger: each entity's group and its exact span of the text
    (the words without the space before them), as the README prints them."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [shown] = TAGGING_CALL.findall(readme)
    text = re.search(r'tagger\("([^"]+)"\)', readme).group(1)
    tagger = pipeline("token-classification", model=str(TAGGER / "model"), trust_remote_code=True,
                      aggregation_strategy="first")
    entities = tagger(text)
    printed = [f"{e['entity_group']} {e['word']!r} {e['start']}-{e['end']}" for e in entities]
    assert shown.strip().splitlines() == printed
    for entity in entities:
        assert text[entity["start"]:entity["end"]] == entity["word"], entity


CLASSIFYING_CALL = re.compile(
    r'classifier = pipeline\("text-classification", model="results/sst2/model".*?```\n```text\n(.*?)```', re.S)


def test_the_readme_classification_call_gives_the_labels_it_shows():
    """The README's classification example, run on the shipped SST-2 classifier, prints what the README shows."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    [shown] = CLASSIFYING_CALL.findall(readme)
    texts = json.loads("[" + re.search(r"classifier\(\[(.+?)\]\)", readme).group(1) + "]")
    classifier = pipeline("text-classification", model=str(REPO / "results" / "sst2" / "model"), trust_remote_code=True)
    printed = [f"{result['label']} {round(result['score'], 3)}" for result in classifier(texts)]
    assert shown.strip().splitlines() == printed
