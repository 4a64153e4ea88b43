"""The corpus command (scripts/predict.py, `vaswani-predict`): a model of this project run over a file of any
size, its outputs written in input order, on every core, GPU and machine (vaswani.prediction.run)."""
