"""Publishing on the Hugging Face Hub (`scripts/push_to_hub.py`), one module per job:

    model_card  the card of a saved model, rendered from the repository's model_card.md template
    push        push_to_hub.py's options, the folder a Hub repository will hold, and its upload in one commit
    space       a Space for a model (push_to_hub.py --space): the web demo, its requirements, its card

The project's recipes, which push_to_hub.py's --recipe turns into a shipped model's card, live in the checkout with
the repository's tools (scripts/tools/vaswani_tools: recipes, recipe_cards), not in the package.
"""
