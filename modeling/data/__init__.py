"""The data every command reads, below the rooms that train, fine-tune and evaluate (they import it; it imports none
of them), one module per job:

    arguments   the data options the commands share, named as in transformers' example scripts
    loading     local JSON Lines / JSON / CSV files or a Hub dataset, each source checked before it is loaded
    splits      a split loaded with the checks that make a bad input fail early and clearly; the fine-tuning splits
    label_sets  the label set of a classification or tagging task, and a dataset's label values mapped onto its ids
"""
