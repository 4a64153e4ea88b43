"""scripts/push_to_hub.py and the model card: the dry-run folder is complete and loads in a fresh process, the upload
sends exactly that folder (seen at huggingface_hub's HTTP boundary, with a fake Hub behind a mock transport), and
bad input is refused with a message."""

import hashlib
import json
import shutil
import socket
import subprocess
import sys

import httpx2
import huggingface_hub
import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from huggingface_hub.utils._http import default_client_factory

from helpers import REPO, run_isolated, tiny_config
from hub_helpers import CODE_FILES, EXPECTED_FILES, FakeHub, REPO_ID, RESULTS, files_of, push_to_hub, run
from vaswani.cli import run_command
from vaswani import VaswaniForConditionalGeneration, VaswaniForSequenceClassification
from vaswani.runs import manifests


# --- the dry run ---------------------------------------------------------------------------------------------------


def test_dry_run_writes_a_complete_folder_and_nothing_else(dry_run_folder, checkpoint):
    assert set(files_of(dry_run_folder)) == EXPECTED_FILES
    assert set(manifests.read_manifest(dry_run_folder)["files"]) == EXPECTED_FILES  # and the record of them
    for name in CODE_FILES:
        assert (dry_run_folder / name).read_bytes() == (checkpoint / name).read_bytes()
    config = json.loads((dry_run_folder / "config.json").read_text())
    assert set(config["custom_pipelines"]) == {"translation", "summarization", "text2text-generation", "translation_en_to_de"}
    assert "AutoModelForSeq2SeqLM" in config["auto_map"]


def test_dry_run_folder_loads_in_a_fresh_process_and_translates_like_the_model(dry_run_folder, checkpoint, tokenizer):
    model = VaswaniForConditionalGeneration.from_pretrained(checkpoint).eval()
    text = "A man is riding a horse."
    expected = model.generate(**tokenizer([text], return_tensors="pt"), num_beams=2, max_new_tokens=8)[0].tolist()
    stdout = run_isolated(
        f"""
        import json
        from transformers import AutoModelForSeq2SeqLM, pipeline
        folder = {str(dry_run_folder)!r}
        translator = pipeline("translation", model=folder, trust_remote_code=True)
        [result] = translator({text!r}, num_beams=2, max_new_tokens=8, return_tensors=True)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
        print(json.dumps({{"ids": result["translation_token_ids"].tolist(), "class": type(model).__name__}}))
        """
    )
    result = json.loads(stdout.strip().splitlines()[-1])
    assert result == {"ids": expected, "class": "VaswaniForConditionalGeneration"}


def test_model_card_metadata_and_sections(dry_run_folder):
    card = ModelCard.load(dry_run_folder / "README.md")
    metadata = card.data.to_dict()
    assert metadata["license"] == "apache-2.0"
    assert metadata["language"] == ["en", "de"]
    assert metadata["pipeline_tag"] == "translation"
    assert metadata["library_name"] == "transformers"
    assert metadata["datasets"] == ["bentrevett/multi30k"]
    assert metadata["metrics"] == ["sacrebleu", "tokenized_bleu"]
    assert "vaswani" in metadata["tags"]
    [entry] = metadata["model-index"]
    assert entry["name"] == REPO_ID.split("/")[1]
    [result] = entry["results"]
    assert result["task"]["type"] == "translation"
    assert result["dataset"] == {"name": "bentrevett/multi30k", "type": "bentrevett/multi30k", "split": "test"}
    assert [(m["type"], m["name"], m["value"]) for m in result["metrics"]] == [
        (m["type"], m["name"], m["value"]) for m in RESULTS["metrics"]
    ]
    text = card.text
    for heading in ("## Model description", "## Intended uses and limitations", "## Training data",
                    "## Training procedure", "## Evaluation", "## How to use", "## Citation"):
        assert heading in text
    assert "Ten sentence pairs written for the tests." in text
    assert "| bentrevett/multi30k | test | 1000 | sacreBLEU | 12.34 |" in text
    assert "nrefs:1|case:mixed|tok:13a" in text and "`num_beams=4`" in text and RESULTS["conventions"] in text
    assert f'pipeline("translation", model="{REPO_ID}", trust_remote_code=True)' in text
    assert f'AutoModelForSeq2SeqLM.from_pretrained("{REPO_ID}", trust_remote_code=True)' in text
    assert "Attention Is All You Need" in text and "arxiv.org/abs/1706.03762" in text
    assert "| direction | en → de" in text


@pytest.mark.parametrize("lsum, listed", [(34.3, ["rouge1", "rougeL"]), (35.1, ["rouge1", "rougeL", "rougeLsum"])],
                         ids=["equal to ROUGE-L", "its own"])
def test_a_summarization_card_lists_rouge_lsum_only_where_it_is_not_rouge_l(checkpoint, tmp_path, lsum, listed):
    """rouge-score's ROUGE-Lsum on summaries written on one line is ROUGE-L again: the card names it once (the SAMSum
    card listed 34.3 twice); --language gives a summarizer, which has no source_lang, its language."""
    signature = "rouge-score:0.1.2|stemmer:yes|f-measure|mean-over-examples"
    results = {**RESULTS, "task": "summarization", "metrics": [
        {"type": kind, "name": name, "value": value, "signature": signature}
        for kind, name, value in (("rouge1", "ROUGE-1", 43.7), ("rougeL", "ROUGE-L", 34.3), ("rougeLsum", "ROUGE-Lsum", lsum))
    ]}
    (tmp_path / "results.json").write_text(json.dumps(results))
    push_to_hub.main(["--model", str(checkpoint), "--repo_id", "someone/samsum", "--dry-run", "--language", "en",
                      "--output_dir", str(tmp_path / "out"), "--results", str(tmp_path / "results.json")])
    card = ModelCard.load(tmp_path / "out" / "README.md").data.to_dict()
    assert card["metrics"] == listed
    assert [metric["type"] for metric in card["model-index"][0]["results"][0]["metrics"]] == listed
    assert card["language"] == ["en"]


def test_classifier_card_names_its_labels_and_task(tokenizer, tmp_path):
    labels = {0: "negative", 1: "positive"}
    model = VaswaniForSequenceClassification(
        tiny_config(vocab_size=len(tokenizer), num_labels=2, id2label=labels, label2id={v: k for k, v in labels.items()})
    )
    model.save_pretrained(tmp_path / "run")
    tokenizer.save_pretrained(tmp_path / "run")
    results = {**RESULTS, "task": "text-classification", "decoding": {},
               "dataset": {"name": "../shared/data/sst2/validation.jsonl", "split": "validation"},
               "metrics": [{"type": "accuracy", "name": "Accuracy", "value": 0.81}]}
    (tmp_path / "results.json").write_text(json.dumps(results))
    push_to_hub.main(["--model", str(tmp_path / "run"), "--repo_id", "someone/sst2", "--dry-run",
                      "--output_dir", str(tmp_path / "out"), "--results", str(tmp_path / "results.json")])
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert card.data.pipeline_tag == "text-classification"
    result = card.data.to_dict()["model-index"][0]["results"][0]
    assert result["dataset"]["type"] == "sst2"  # a local file is named by its folder, not by its path
    assert "datasets" not in card.data.to_dict()
    assert "negative, positive" in card.text
    assert 'pipeline("text-classification", model="someone/sst2", trust_remote_code=True)' in card.text


# --- the upload, seen at the HTTP boundary ---------------------------------------------------------------------------


@pytest.fixture
def fake_hub(monkeypatch):
    hub = FakeHub(files_already_there=[".gitattributes", "README.md", "pytorch_model.bin"])
    # Xet uploads go through hf_xet's own (Rust) HTTP client, out of reach of the Python transport: the switch that
    # huggingface_hub documents for this (HF_HUB_DISABLE_XET) sends the weights through the LFS protocol instead.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_DISABLE_XET", True)
    huggingface_hub.set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(hub)))
    yield hub
    huggingface_hub.set_client_factory(default_client_factory)  # what huggingface_hub uses when left alone


def test_upload_sends_exactly_the_dry_run_folder(fake_hub, checkpoint, dry_run_folder, tmp_path, capsys):
    url = push_to_hub.main(["--model", str(checkpoint), "--repo_id", REPO_ID, "--token", "hf_fake_token",
                            "--private", "--training_data", "Ten sentence pairs written for the tests."])
    assert url == f"https://huggingface.co/{REPO_ID}/commit/abc123"
    assert fake_hub.created == {"name": "vaswani-tiny-en-de", "organization": "someone", "visibility": "private"}
    assert fake_hub.authorizations == {"Bearer hf_fake_token"}
    received = fake_hub.received_files()
    assert received == files_of(dry_run_folder)  # the same files, byte for byte
    assert set(fake_hub.validated_cards) == {received["README.md"].decode()}
    lfs_file = next(item["value"] for item in fake_hub.commit if item["key"] == "lfsFile")
    assert lfs_file["path"] == "model.safetensors"
    assert lfs_file["oid"] == hashlib.sha256(received["model.safetensors"]).hexdigest()
    # what the repository held beyond the folder goes in the same commit; .gitattributes stays
    assert fake_hub.deleted_files() == ["pytorch_model.bin"]
    assert f"Uploaded {6 + len(CODE_FILES)} files" in capsys.readouterr().out


def test_upload_errors_from_the_hub_reach_the_user(fake_hub, checkpoint):
    denied = lambda request: httpx2.Response(403, json={"error": "You don't have the rights to create this model."})
    huggingface_hub.set_client_factory(lambda: httpx2.Client(transport=httpx2.MockTransport(denied)))
    with pytest.raises(huggingface_hub.errors.HfHubHTTPError, match="rights to create"):
        push_to_hub.main(["--model", str(checkpoint), "--repo_id", REPO_ID, "--token", "hf_fake_token"])


def test_a_hub_out_of_reach_is_one_line(checkpoint, monkeypatch, capsys):
    """Without network (here: an endpoint where nothing listens) and without HF_HUB_OFFLINE, the command ends in one
    line naming the endpoint, not in httpx's traceback."""
    with socket.socket() as probe:  # a local port that nothing listens on: the connection is refused at once
        probe.bind(("127.0.0.1", 0))
        endpoint = f"http://127.0.0.1:{probe.getsockname()[1]}"
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", endpoint)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(sys, "argv", ["push_to_hub.py", "--model", str(checkpoint), "--repo_id", REPO_ID,
                                      "--token", "hf_fake_token"])
    with pytest.raises(SystemExit) as stopped:
        run_command(push_to_hub.main, huggingface_hub.errors.HfHubHTTPError)
    assert stopped.value.code == 1
    errors = capsys.readouterr().err
    *_, line = errors.strip().splitlines()  # (after the progress bars of loading and saving)
    assert "Traceback" not in errors and "httpx" not in errors
    assert line.startswith(f"push_to_hub.py: error: the Hub ({endpoint}) cannot be reached: ") and "Nothing was" in line


# --- bad input ---------------------------------------------------------------------------------------------------------


def test_the_command_line_reports_bad_input_without_a_traceback(tmp_path):
    result = subprocess.run(
        [sys.executable, str(REPO / "scripts" / "push_to_hub.py"), "--model", str(tmp_path), "--repo_id", REPO_ID,
         "--dry-run", "--output_dir", str(tmp_path / "o")],
        capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 1
    assert result.stderr.strip() == f"push_to_hub.py: error: --model {tmp_path} is not a model folder: it has no config.json."


def test_dry_run_needs_an_empty_output_folder(checkpoint, tmp_path):
    with pytest.raises(ValueError, match="--output_dir"):
        run(["--model", str(checkpoint), "--repo_id", REPO_ID, "--dry-run"])
    (tmp_path / "stale.txt").write_text("old")
    with pytest.raises(FileExistsError, match="exists and is not empty \\(stale.txt\\)"):
        run(["--model", str(checkpoint), "--repo_id", REPO_ID, "--dry-run", "--output_dir", str(tmp_path)])


def test_a_folder_that_is_not_a_checkpoint_is_named(tmp_path, checkpoint):
    with pytest.raises(FileNotFoundError, match="no config.json"):
        run(["--model", str(tmp_path), "--repo_id", REPO_ID, "--dry-run", "--output_dir", str(tmp_path / "o")])
    without_tokenizer = tmp_path / "model-only"
    VaswaniForConditionalGeneration.from_pretrained(checkpoint).save_pretrained(without_tokenizer)
    with pytest.raises(FileNotFoundError, match="no tokenizer"):
        run(["--model", str(without_tokenizer), "--repo_id", REPO_ID, "--dry-run", "--output_dir",
             str(tmp_path / "o")])


def test_an_invalid_repo_id_is_refused_before_any_work(checkpoint, tmp_path):
    with pytest.raises(ValueError, match="not a valid Hub repository id"):
        run(["--model", str(checkpoint), "--repo_id", "someone/bad name!", "--dry-run", "--output_dir",
             str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize(
    "broken, message",
    [
        ({"task": "poetry"}, "`task` is 'poetry'"),
        ({"dataset": {"split": "test"}}, r"`dataset.name` is missing"),
        ({"metrics": []}, "`metrics` is empty"),
        ({"metrics": [{"type": "sacrebleu", "name": "BLEU", "value": "high"}]},
         r"`metrics\[0\].value` is missing or not"),
        # a results file of an older version: its `bleu` is refused, naming the command that renames it
        ({"metrics": [{"type": "sacrebleu", "name": "sacreBLEU", "value": 1.0},
                      {"type": "bleu", "name": "BLEU", "value": 2.0}]},
         r"`metrics\[1\].type` is `bleu`, a retired metric name \(here: tokenized_bleu\); python "
         r"scripts/tools/results_table.py --rename_metrics --rename_paths .*results\.json rewrites it"),
        # token classification's entity F1 was `f1` (text classification's name): refused there only
        ({"task": "token-classification", "metrics": [{"type": "f1", "name": "Entity F1", "value": 0.8}]},
         r"`metrics\[0\].type` is `f1`, a retired metric name \(here: entity_f1\); python "),
        ({"decoding": [4]}, "`decoding` is not a mapping"),
        ({"decoding": {"num_beams": 0}}, r"`decoding.num_beams` is 0; expected an integer >= 1"),
        ({"decoding": {"num_beams": 4, "no_repeat_ngram_size": "3"}}, r"`decoding.no_repeat_ngram_size` is '3'"),
        ({"decoding": {"num_beams": 4, "length_penalty": "long"}}, r"`decoding.length_penalty` is 'long'"),
        # JSON as Python reads it takes NaN and Infinity: the card's model-index would publish them as scores
        ({"metrics": [{"type": "sacrebleu", "name": "BLEU", "value": float("nan")}]},
         r"`metrics\[0\].value` is nan; expected a finite number"),
        ({"metrics": [{"type": "sacrebleu", "name": "BLEU", "value": float("-inf")}]},
         r"`metrics\[0\].value` is -inf; expected a finite number"),
        ({"decoding": {"num_beams": 4, "length_penalty": float("inf")}},
         r"`decoding.length_penalty` is inf; expected a finite number"),
    ],
)
def test_a_broken_results_file_names_the_field(checkpoint, tmp_path, broken, message):
    results = tmp_path / "results.json"
    results.write_text(json.dumps({**RESULTS, **broken}))
    with pytest.raises(ValueError, match=message):
        run(["--model", str(checkpoint), "--repo_id", REPO_ID, "--dry-run", "--output_dir", str(tmp_path / "o"),
             "--results", str(results)])
    assert not (tmp_path / "o").exists()


def test_the_published_model_decodes_as_its_results_were_scored(checkpoint, tmp_path):
    """generate() and the pipelines, with no settings, give what the card reports: the results file's decoding is
    the saved generation config (and no leftover max_length makes every call warn)."""
    results = tmp_path / "results.json"
    decoding = {"num_beams": 3, "length_penalty": 1.3, "no_repeat_ngram_size": 3, "max_new_tokens": 12}
    results.write_text(json.dumps({**RESULTS, "decoding": decoding}))
    output = tmp_path / "o"
    run(["--model", str(checkpoint), "--repo_id", REPO_ID, "--dry-run", "--output_dir", str(output),
         "--results", str(results)])
    saved = json.loads((output / "generation_config.json").read_text())
    assert {key: saved.get(key) for key in decoding} == decoding
    assert saved.get("max_length") is None
    model = VaswaniForConditionalGeneration.from_pretrained(output).eval()
    source = torch.tensor([[5, 6, 7, 8, 2]])
    assert torch.equal(model.generate(source), model.generate(source, **decoding))

    # a beam-search checkpoint (length penalty 0.6) published with greedy results keeps no length penalty
    beamed = tmp_path / "beamed"
    model.generation_config.update(num_beams=4, length_penalty=0.6)
    model.save_pretrained(beamed)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (beamed / name).write_bytes((checkpoint / name).read_bytes())
    greedy = tmp_path / "greedy.json"
    greedy.write_text(json.dumps({**RESULTS, "decoding": {"num_beams": 1, "length_penalty": 0.6, "max_new_tokens": 9}}))
    run(["--model", str(beamed), "--repo_id", REPO_ID, "--dry-run", "--output_dir", str(tmp_path / "g"),
         "--results", str(greedy)])
    saved = json.loads((tmp_path / "g" / "generation_config.json").read_text())
    assert saved["num_beams"] == 1 and saved["max_new_tokens"] == 9
    assert saved.get("length_penalty") is None


def test_a_results_file_that_is_not_json_is_named(checkpoint, tmp_path):
    results = tmp_path / "results.json"
    results.write_text("{not json")
    with pytest.raises(ValueError, match="results.json is not valid JSON"):
        run(["--model", str(checkpoint), "--repo_id", REPO_ID, "--dry-run", "--output_dir", str(tmp_path / "o"),
             "--results", str(results)])


def test_the_card_metadata_is_valid_yaml_without_results(checkpoint, tmp_path):
    (tmp_path / "run").mkdir()
    for path in checkpoint.iterdir():
        if path.name != "evaluation_results.json":
            (tmp_path / "run" / path.name).write_bytes(path.read_bytes())
    run(["--model", str(tmp_path / "run"), "--repo_id", REPO_ID, "--dry-run", "--output_dir", str(tmp_path / "o")])
    text = (tmp_path / "o" / "README.md").read_text()
    metadata = yaml.safe_load(text.split("---")[1])
    assert "model-index" not in metadata and metadata["pipeline_tag"] == "translation"
    assert "No evaluation results were supplied" in text


# --- a folder the project ships (results/*/model): --recipe, no Hub repository, replaced in place ------------------


def test_a_recipe_folder_names_its_recipe_commands_and_commit_and_replaces_the_old_one(checkpoint, tmp_path):
    output = tmp_path / "model"  # as a shipped folder: one of an earlier version, without a manifest
    shutil.copytree(checkpoint, output, ignore=shutil.ignore_patterns("optimizer.pt", "train.log"))
    shutil.copy(output / "model.safetensors", output / "model-00001-of-00002.safetensors")  # a file the new one lacks
    run(["--model", str(checkpoint), "--recipe", "Multi30k en->de", "--dry-run", "--output_dir", str(output),
         "--overwrite_output_dir"])
    assert set(files_of(output)) == EXPECTED_FILES  # the old contents are gone
    card = ModelCard.load(output / "README.md")
    assert card.data.model_name == "vaswani-multi30k-en-de"
    assert "Made by the recipe **Multi30k en->de** of `scripts/configs/recipes.yaml`" in card.text
    recipes = yaml.safe_load((REPO / "scripts" / "configs" / "recipes.yaml").read_text())["recipes"]
    command = next(recipe["command"] for recipe in recipes if recipe["name"] == "Multi30k en->de").strip()
    assert command in card.text
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO, capture_output=True, text=True).stdout.strip()
    assert f"Trained by commit `{head}`" in card.text  # (the suite runs in a git checkout: .ci/run clones one)
    # the recipe's results file fills the model-index; the usage examples name the folder, not a Hub repository
    results = json.loads((REPO / "results" / "multi30k_en_de" / "evaluation_results.json").read_text())
    assert card.data.eval_results[0].metric_value == results["metrics"][0]["value"]
    assert f'pipeline("translation", model="{output.as_posix()}", trust_remote_code=True)' in card.text


def test_what_a_recipe_fills_the_options_can_give_and_the_recipe_leaves_them(checkpoint, tmp_path):
    """The package's publishing knows no recipe (they live in the checkout, scripts/tools/vaswani_tools): --model_name,
    --training_data and --training_procedure give the card what --recipe would, and win over the recipe."""
    from vaswani.hub.push import PushArguments

    assert "recipe" not in PushArguments.__dataclass_fields__
    given = ["--model_name", "my-en-de", "--training_data", "Our captions.", "--training_procedure", "Our steps."]
    for extra in ([], ["--recipe", "Multi30k en->de"]):
        output = tmp_path / f"model{len(extra)}"
        run(["--model", str(checkpoint), *given, *extra, "--dry-run", "--output_dir", str(output)])
        card = ModelCard.load(output / "README.md")
        assert card.data.model_name == "my-en-de" and "Our captions." in card.text and "Our steps." in card.text
        assert "Made by the recipe" not in card.text


def test_recipe_and_overwrite_mistakes_are_refused_with_a_message(checkpoint, tmp_path):
    with pytest.raises(ValueError, match=r"--recipe 'Multi30k en->fr' is not a recipe of .*the recipes are \[.*'SAMSum'"):
        run(["--model", str(checkpoint), "--recipe", "Multi30k en->fr", "--dry-run", "--output_dir",
             str(tmp_path / "o")])
    assert not (tmp_path / "o").exists()
    with pytest.raises(ValueError, match="--repo_id is needed to upload"):
        run(["--model", str(checkpoint)])
    with pytest.raises(ValueError, match="is --model .* would delete or overwrite what the command reads"):
        run(["--model", str(checkpoint), "--dry-run", "--output_dir", str(checkpoint), "--overwrite_output_dir"])
    assert (checkpoint / "config.json").is_file()


# --- the card from what the run left beside the checkpoint ---------------------------------------------------------


# the data options of a record, as train.py writes them
TRAIN_PY_DATA = {"train_file": "../shared/data/multi30k/train.jsonl", "validation_file": None, "max_train_samples": 900,
                 "config_overrides": "d_model=32"}


def test_a_train_py_checkpoint_card_has_its_data_and_options_from_arguments_json(checkpoint, tmp_path):
    run_folder = tmp_path / "runs" / "tiny"
    (run_folder / "best").mkdir(parents=True)
    for path in checkpoint.iterdir():
        (run_folder / "best" / path.name).write_bytes(path.read_bytes())
    options = {**TRAIN_PY_DATA, "task": "translation", "source_column": "en", "target_column": "de",
               "preset": "tiny", "max_steps": 300, "learning_rate": 0.002, "output_dir": "runs/tiny", "resume": False}
    (run_folder / "arguments.json").write_text(json.dumps(options))
    run(["--model", str(run_folder / "best"), "--repo_id", REPO_ID, "--dry-run", "--output_dir", str(tmp_path / "o")])
    text = (tmp_path / "o" / "README.md").read_text()
    data = text.split("## Training data")[1].split("## Training procedure")[0]
    assert '"train_file": "../shared/data/multi30k/train.jsonl"' in data and '"target_column": "de"' in data
    assert '"max_train_samples": 900' in data
    assert "Not documented" not in text
    procedure = text.split("## Training procedure")[1].split("## Evaluation")[0]
    assert "scripts/train.py" in procedure and '"max_steps": 300' in procedure and '"learning_rate": 0.002' in procedure
    assert '"config_overrides": "d_model=32"' in procedure
    assert "output_dir" not in procedure and "validation_file" not in procedure  # bookkeeping and unset options


def test_a_fine_tuned_checkpoint_card_reads_the_scripts_record_and_the_trainer_state(checkpoint, tmp_path):
    folder = tmp_path / "ft"
    folder.mkdir()
    for path in checkpoint.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    record = {"script": "finetune_seq2seq.py", "model": {"model_name_or_path": "results/multi30k_en_de/model"},
              "data": {"dataset_name": "knkarthick/samsum", "train_file": None}, "task": {"task": "summarization"},
              "training": {"learning_rate": 5e-4, "num_train_epochs": 3.0, "hub_token": "<HUB_TOKEN>", "seed": 1}}
    (folder / "arguments.json").write_text(json.dumps(record))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": 1234, "epoch": 3.0}))
    (folder / "training_args.bin").write_bytes(b"\x80\x04 a pickle that nothing may read")
    run(["--model", str(folder), "--repo_id", REPO_ID, "--dry-run", "--output_dir", str(tmp_path / "o")])
    text = (tmp_path / "o" / "README.md").read_text()
    assert '"dataset_name": "knkarthick/samsum"' in text.split("## Training data")[1].split("## Training procedure")[0]
    procedure = text.split("## Training procedure")[1].split("## Evaluation")[0]
    assert "Fine-tuned from results/multi30k_en_de/model with `scripts/finetune_seq2seq.py`" in procedure
    assert "1,234 updates (3.00 epochs)" in procedure and '"learning_rate": 0.0005' in procedure
    assert "HUB_TOKEN" not in procedure
    assert not (tmp_path / "o" / "training_args.bin").exists()


def test_a_card_holds_its_own_results_only(dry_run_folder):
    text = (dry_run_folder / "README.md").read_text()
    assert "Recipes of this project" not in text and "recipe-results" not in text
    assert "SAMSum" not in text and len(text.encode()) < 12_000


def test_a_huge_or_broken_run_record_is_named(checkpoint, tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    for path in checkpoint.iterdir():
        (folder / path.name).write_bytes(path.read_bytes())
    (folder / "arguments.json").write_text("[1, 2]")
    with pytest.raises(ValueError, match=r"arguments.json holds a list; expected a JSON object"):
        push_to_hub.main(["--model", str(folder), "--dry-run", "--output_dir", str(tmp_path / "o")])
    (folder / "arguments.json").write_text(" " * 1_000_001)
    with pytest.raises(ValueError, match=r"arguments.json is 1,000,001 bytes"):
        push_to_hub.main(["--model", str(folder), "--dry-run", "--output_dir", str(tmp_path / "o2")])


# --- what code a published folder points to ---------------------------------------------------------------------


def plant_foreign_code(folder, marker):
    """Point a checkpoint's config and tokenizer config at a module planted beside them, which creates `marker` when
    it is imported; also the form that fetches code from another Hub repository."""
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"].update({"AutoModel": "evil.Model", "AutoModelForCausalLM": "someone/else--evil.Model"})
    config["custom_pipelines"]["evil-task"] = {"impl": "evil.Pipeline", "pt": ["AutoModel"], "type": "text"}
    (folder / "config.json").write_text(json.dumps(config))
    tokenizer_config = json.loads((folder / "tokenizer_config.json").read_text())
    tokenizer_config["auto_map"] = {"AutoTokenizer": ["evil.Tokenizer", None], "AutoModel": "evil.Model"}
    (folder / "tokenizer_config.json").write_text(json.dumps(tokenizer_config))
    (folder / "evil.py").write_text(f"import pathlib\npathlib.Path({str(marker)!r}).touch()\nclass Model: pass\n")


def test_a_published_folder_points_only_to_this_projects_code(checkpoint, tmp_path, caplog):
    """Entries of auto_map and custom_pipelines that this project does not write are dropped, each named in a
    warning: with the planted module copied beside the published folder, loading it with trust_remote_code runs
    this project's classes and never the module."""
    from vaswani.remote_code.configuration_vaswani import AUTO_MAP

    planted = tmp_path / "planted"
    shutil.copytree(checkpoint, planted)
    marker = tmp_path / "the-planted-module-ran"
    plant_foreign_code(planted, marker)
    with caplog.at_level("WARNING", logger="vaswani"):
        folder = run(["--model", str(planted), "--dry-run", "--output_dir", str(tmp_path / "out")])
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == json.loads(json.dumps(AUTO_MAP))
    assert "evil-task" not in config["custom_pipelines"]
    assert json.loads((folder / "tokenizer_config.json").read_text())["auto_map"] == {
        "AutoTokenizer": ["tokenization_vaswani.VaswaniTokenizer", None]}
    warned = caplog.text
    for entry in ("auto_map AutoModel -> 'evil.Model'", "auto_map AutoModelForCausalLM -> 'someone/else--evil.Model'",
                  "custom_pipelines evil-task", "auto_map AutoTokenizer -> ['evil.Tokenizer', None]"):
        assert f"{planted}: dropped {entry}" in warned
    shutil.copy(planted / "evil.py", folder / "evil.py")
    run_isolated(f"""
        from transformers import AutoModel
        model = AutoModel.from_pretrained({str(folder)!r}, trust_remote_code=True)
        assert type(model).__name__ == "VaswaniModel", type(model)
    """)
    assert not marker.exists()
