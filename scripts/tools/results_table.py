"""Fill the project's results table, in README.md and results/README.md, from the files its runs wrote: the
evaluation results of scripts/evaluate_model.py and the training summaries, for each recipe of
scripts/configs/recipes.yaml.

    python scripts/tools/results_table.py            # rewrite the tables
    python scripts/tools/results_table.py --check    # exit 1 if a file's table is out of date; writes nothing
    python scripts/tools/results_table.py --rename_metrics   # first rename the retired metric names, then the tables

Only the text between markers is rewritten: `<!-- recipe-results:start -->` / `<!-- recipe-results:end -->` get the
table with every column and each recipe's details (results/README.md), `<!-- recipe-table:start -->` /
`<!-- recipe-table:end -->` a short table (README.md: recipe, data, result, target met, links to the details and
notes), `<!-- shipped-models:start -->` / `end` the shipped models. A recipe whose results file does not exist yet
says "not run yet": no number in the table is typed by hand. Under the full table each recipe has a section of its
own: its commands and the evaluation conventions from its results file (decoding settings, metric signatures), so
that every number stands next to how it was measured, its training time (the sum of its stages' when
`training_summary` lists one file a stage), the picture the run made, if any, and a link to its notes file
(`notes_file`: what the recipe is and what was tried).

`--rename_metrics` brings files an older version wrote to the project's metric names (vaswani.evaluation.metrics.names):
`bleu`, which meant sacreBLEU in train.py's training summaries and tokenized lowercased BLEU in results files, recipes
and model cards, becomes `sacrebleu` or `tokenized_bleu` as it meant there, in the recipes file and in the results
files, training summaries, GPU-suite reports and model cards (the metadata; a card's text names no metric by type)
under `--rename_paths` (default: results). The names are rewritten where they stand, the rest of each file as it was;
with `--check`, the files that hold one are named and nothing is written.
"""

import sys

from transformers import HfArgumentParser

from vaswani_tools.results_table import TableArguments, rename_metrics, update_tables


def main(argv: list[str] | None = None) -> int:
    """0 when the files are written (or, with --check, up to date); 1 when --check finds a block out of date or,
    with --rename_metrics, a retired metric name."""
    (args,) = HfArgumentParser(TableArguments).parse_args_into_dataclasses(args=argv)
    if args.rename_metrics and (status := rename_metrics(args)) != 0:
        return status
    return update_tables(args)


if __name__ == "__main__":
    try:
        sys.exit(main(sys.argv[1:]))
    except (ValueError, FileNotFoundError) as error:
        print(f"results_table.py: error: {error}", file=sys.stderr)
        sys.exit(2)
