"""Serve the models in a web page (Gradio): the five the repository ships, or one model of your own.

    python scripts/app.py                                      # the shipped models, at http://127.0.0.1:7860
    python scripts/app.py --model outputs/my-model/best        # one model, its task read from its config
    python scripts/app.py --host 0.0.0.0 --port 8000           # reachable from other machines, on another port

One tab per model, each with an example to run in one click: translation (with the cross-attention heatmap beside it,
as demo.py draws it), a dialogue's summary, a review's label, a text's entities highlighted. The models are loaded
through the installed package's classes (no code file of a model folder runs) and decode as their cards report, on
the package's fast CPU path where there is no GPU. Needs the `demo` extra: pip install -e '.[demo]'. The page:
vaswani.serving.app; a Space of it for a model: push_to_hub.py --space.
"""

from vaswani.cli import run_command
from vaswani.serving.app import main


if __name__ == "__main__":
    run_command(main)
