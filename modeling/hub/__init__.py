"""Publishing on the Hugging Face Hub (`scripts/push_to_hub.py`), one module per job:

    model_card  the model card of a checkpoint, rendered from the repository's model_card.md template
    push        push_to_hub.py's options, the folder a Hub repository will hold, and its upload in one commit
    recipes     the project's recipes (scripts/configs/recipes.yaml): what each trains and evaluates, and how (the
                card of a shipped model names its recipe; scripts/tools/results_table.py tables them)
    space       a Space for a checkpoint (push_to_hub.py --space): the web demo, its requirements, its card
"""
