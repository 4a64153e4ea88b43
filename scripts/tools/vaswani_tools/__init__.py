"""The modules behind the repository's own tools (the commands beside this folder), which the installed package does
not ship: no user of a model runs them. They import `vaswani`; the package never imports them.

    benchmarking    the speed measurements: setups, the Marian twin, FLOPs, the matmul peak (benchmark.py, the suite)
    gpu_suite       one lent GPU measured in one command (gpu_suite.py): MFU, the engines engaged, a recipe on a clock
    gpu_wheels      what a lent GPU machine lacks for the suite (gather_gpu_wheels.py)
    results_table   the results tables of README.md and results/README.md (results_table.py)
    recipes         the project's recipes (scripts/configs/recipes.yaml): what each trains and evaluates, and how
    recipe_cards    a shipped model's card from its recipe (scripts/push_to_hub.py --recipe)

A command here finds them beside itself (Python puts a script's folder first on sys.path); the tests through pytest's
`pythonpath` (pyproject.toml).
"""
