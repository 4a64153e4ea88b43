"""Publish a model on the Hugging Face Hub: weights, tokenizer, code files and a rendered model card.

    # write the exact folder that would be uploaded, and stop
    python scripts/push_to_hub.py --model runs/multi30k/best --repo_id me/vaswani-multi30k-en-de --dry-run \
        --output_dir hub/vaswani-multi30k-en-de

    # the folder of a model this project ships (results/*/model): the card says which recipe of
    # scripts/configs/recipes.yaml made it, with its commands, and at which commit; no Hub repository is named
    python scripts/push_to_hub.py --model outputs/multi30k_en_de/best --recipe "Multi30k en->de" --dry-run \
        --output_dir results/multi30k_en_de/model --overwrite_output_dir

    # upload it (token from --token, the HF_TOKEN variable, or `hf auth login`)
    python scripts/push_to_hub.py --model runs/multi30k/best --repo_id me/vaswani-multi30k-en-de

    # a Gradio Space serving it in the web demo (scripts/app.py): written locally, then uploaded
    python scripts/push_to_hub.py --model runs/multi30k/best --space --repo_id me/vaswani-en-de-demo \
        --model_repo_id me/vaswani-multi30k-en-de --dry-run --output_dir hub/vaswani-en-de-demo
    python scripts/push_to_hub.py --model runs/multi30k/best --space --repo_id me/vaswani-en-de-demo \
        --model_repo_id me/vaswani-multi30k-en-de

The model is loaded and saved again into a fresh folder, so that the folder holds what a user needs and nothing
else (no optimizer states, logs or older checkpoints), with the code files of this version of the project and the
`custom_pipelines` entries that make `pipeline("translation", model=REPO, trust_remote_code=True)` work. The card
(README.md) is rendered from `model_card.md`, with the `model-index` filled from evaluation results files
(`--results`; by default `evaluation_results.json` in the model folder, which scripts/evaluate_model.py writes).
A generative model's `generation_config.json` is set to the decoding its first results file was scored with (beams,
length penalty, no-repeat n-grams, output length), so that `generate()` and the pipelines give, by default, the
outputs the card reports.

The upload is one commit of that folder; files in the repository that are not in the folder are deleted by the same
commit, so that the repository holds exactly the folder.

With --space the folder is a Gradio Space's (vaswani.hub.space): the web demo's app.py, requirements.txt, the Space's
card with its configuration header, that same model folder in model/, and the package's sources in vaswani/
(the package is not on PyPI). It is written beside --output_dir and renamed into place once complete.
"""

import sys
from pathlib import Path

from huggingface_hub.errors import HfHubHTTPError

from vaswani.cli import run_command
from vaswani.hub import push

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))  # --recipe: the repository's recipes (vaswani_tools)
from vaswani_tools.recipe_cards import RecipeArguments, apply_recipe  # noqa: E402


def main(argv: list[str] | None = None):
    """`vaswani.hub.push.main` with this checkout's `--recipe`: the folder written (with --dry-run) or the URL."""
    return push.main(argv, (RecipeArguments,), lambda args, recipe: apply_recipe(args, recipe.recipe)
                     if recipe.recipe else None)


if __name__ == "__main__":
    run_command(main, HfHubHTTPError)
