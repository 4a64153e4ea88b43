"""Why a run stopped, when the user can do something about it: the message says what happened and what to do."""


class TrainingError(RuntimeError):
    pass


class CheckpointError(TrainingError):
    """A checkpoint or model folder could not be written; the earlier ones are intact."""


class TrainingDiverged(TrainingError):
    """The loss or the gradient stopped being a finite number; the update was not applied."""


class MetricsWriteError(TrainingError):
    """metrics.jsonl could not be written (a full disk); the lines it held are intact."""


__all__ = [
    "CheckpointError",
    "MetricsWriteError",
    "TrainingDiverged",
    "TrainingError",
]
