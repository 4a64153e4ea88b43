"""What a run tells its user: metrics as JSON Lines (one record per logging step or evaluation), a PNG of the
training curves, and a closing summary. TensorBoard gets the same numbers through Accelerate's trackers."""

import json
import math
import os
from pathlib import Path

from ..runs.errors import MetricsWriteError, TrainingError


class MetricsLog:
    """`metrics.jsonl`: one JSON object per line, each with its `step`; written by the main process only. A write
    that fails (a full disk) never costs the lines already there."""

    def __init__(self, path: Path, enabled: bool):
        self.path = path
        self.enabled = enabled

    def write(self, record: dict) -> None:
        """Append `record` as one line. When that fails, what the write added is cut off again (no partial line)
        and MetricsWriteError says so."""
        if not self.enabled:
            return
        line = (json.dumps(record, ensure_ascii=False) + "\n").encode("utf-8")
        try:
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        except OSError as error:
            raise self.write_error(record, error) from None
        try:
            length = os.fstat(descriptor).st_size
            try:
                _write_all(descriptor, line)
            except OSError as error:
                os.ftruncate(descriptor, length)  # shrinking needs no space
                raise self.write_error(record, error) from None
        finally:
            os.close(descriptor)

    def write_error(self, record: dict, error: OSError) -> MetricsWriteError:
        return MetricsWriteError(
            f"Could not write the record of update {record.get('step', '?')} to {self.path} ({error}); the lines it "
            "held before are intact."
        )

    def read(self, tolerate_cut_last_line: bool = False) -> list[dict]:
        """The records; a line that is not a JSON object is an error naming the file and line, except (on resume)
        the last line of a log cut short by a kill, which is dropped."""
        if not self.path.is_file():
            return []
        lines = self.path.read_text(encoding="utf-8", errors="replace").splitlines()
        records = []
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                if not isinstance(record, dict):
                    raise ValueError("not a JSON object")
            except ValueError as error:
                if tolerate_cut_last_line and number == len(lines):
                    continue  # the write a kill interrupted: its update is done again
                raise TrainingError(
                    f"{self.path}, line {number}: not a metrics record ({error}). Repair or delete that line (the "
                    "log only; the checkpoints do not depend on it), then resume."
                ) from None
            records.append(record)
        return records

    def drop_after(self, step: int) -> None:
        """On resume: forget what the interrupted run logged after the checkpoint it resumes from, since those
        updates are done again."""
        if self.enabled and self.path.is_file():
            kept = [record for record in self.read(tolerate_cut_last_line=True) if record.get("step", 0) <= step]
            temporary = self.path.with_suffix(".tmp")
            try:
                temporary.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in kept),
                                     encoding="utf-8")
                temporary.replace(self.path)
            except OSError as error:
                temporary.unlink(missing_ok=True)
                raise MetricsWriteError(
                    f"Could not rewrite {self.path} without the records after update {step} ({error}); it is "
                    "intact. Free disk space, then resume."
                ) from None


def _write_all(descriptor: int, data: bytes) -> None:
    """os.write until all of `data` is written (a write to a filling disk can be short before it fails)."""
    view = memoryview(data)
    while view:
        view = view[os.write(descriptor, view):]


def plot_training_curves(records: list[dict], score_name: str, path: Path) -> Path:
    """Training and validation loss against updates (left), and the validation score against updates (right)."""
    import matplotlib

    matplotlib.use("Agg")  # files only: no display needed
    from matplotlib import pyplot

    train = [r for r in records if "loss" in r]
    evals = [r for r in records if "val_loss" in r]
    figure, (losses, scores) = pyplot.subplots(1, 2, figsize=(11, 4))
    losses.plot([r["step"] for r in train], [r["loss"] for r in train], label="training loss")
    losses.plot([r["step"] for r in evals], [r["val_loss"] for r in evals], "o-", label="validation loss")
    losses.set_xlabel("update")
    losses.set_ylabel("loss (label-smoothed cross-entropy)")
    losses.legend()
    scored = [r for r in evals if isinstance(r.get(score_name), (int, float)) and math.isfinite(r[score_name])]
    scores.plot([r["step"] for r in scored], [r[score_name] for r in scored], "o-", color="tab:green")
    scores.set_xlabel("update")
    scores.set_ylabel(f"validation {score_name}")
    for axes in (losses, scores):
        axes.grid(alpha=0.3)
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return path


def format_duration(seconds: float) -> str:
    minutes, seconds = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m{seconds:02d}s" if hours else f"{minutes}m{seconds:02d}s"


def format_summary(summary: dict) -> str:
    best = summary.get("best_score")
    best_line = (
        f"best {summary['best_metric']} {best:.2f} at update {summary['best_step']} -> {summary['best_model']}"
        if best is not None
        else "no evaluation was run"
    )
    return "\n".join(
        [
            f"Training finished ({summary['stopped_because']}) after {summary['steps']} updates "
            f"in {format_duration(summary['wall_seconds'])}.",
            f"  throughput: {summary['tokens_per_second']:,.0f} tokens/s (source + target, all processes)",
            f"  {best_line}",
            f"  last model: {summary['last_model']}",
            f"  checkpoints: {summary['checkpoints']}",
            f"  metrics: {summary['metrics_file']}  curves: {summary['curves_file']}",
        ]
    )


__all__ = [
    "MetricsLog",
    "format_duration",
    "format_summary",
    "plot_training_curves",
]
