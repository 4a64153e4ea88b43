"""The code a folder this project writes points to: this project's own, and nothing else.

A saved config names the classes that `trust_remote_code=True` imports from the folder (`auto_map`: Auto class ->
`module.Class`, or `other-repo--module.Class`, which transformers fetches from another Hub repository) and the
pipelines it builds (`custom_pipelines`: task -> `impl`). A config loaded from a folder from elsewhere keeps what that
folder declared, and `save_pretrained` writes it back beside this project's entries: a published or fine-tuned folder
would point a user's `AutoModel.from_pretrained(folder, trust_remote_code=True)` at a module planted beside the
weights (`evil.Model`). The commands that write a model folder from a loaded one (push_to_hub.py, the fine-tuning
scripts, average_checkpoints.py, the ONNX export) keep only the entries this project writes, and warn naming each
one dropped; the same for the tokenizer's record (`tokenizer_config.json`'s `auto_map`, which the tokenizer keeps
and saves again beside the AutoTokenizer entry its class writes).
"""

import copy
import logging

from .remote_code.configuration_vaswani import AUTO_MAP, CUSTOM_PIPELINES


logger = logging.getLogger(__name__)

# every pipeline implementation a config of this project may declare (modeling/remote_code/pipeline_vaswani.py's
# classes)
OWN_PIPELINES = {entry["impl"] for entry in CUSTOM_PIPELINES.values()} | {
    "pipeline_vaswani.TokenClassificationPipeline"
}


def keep_own_code_references(config, source: str) -> list[str]:
    """Give `config` this project's `auto_map` (`AUTO_MAP`: each Auto class it registers, mapped to a class of its
    code files) in place of whatever it held, and drop from `config.custom_pipelines` every pipeline that its
    pipeline file does not implement; warn, naming each entry dropped or replaced and `source` (where the config was
    loaded from). Returns those entries."""
    dropped = _foreign_auto_map_entries(getattr(config, "auto_map", None), AUTO_MAP)
    config.auto_map = copy.deepcopy(AUTO_MAP)
    pipelines = getattr(config, "custom_pipelines", None)
    if isinstance(pipelines, dict):
        for task in list(pipelines):
            entry = pipelines[task]
            if not (isinstance(entry, dict) and entry.get("impl") in OWN_PIPELINES):
                dropped.append(f"custom_pipelines {task} -> {pipelines.pop(task)!r}")
    elif pipelines is not None:
        dropped.append(f"custom_pipelines {pipelines!r}")
        config.custom_pipelines = {}
    _warn(dropped, source, "config")
    return dropped


def keep_own_tokenizer_code_references(tokenizer, source: str) -> list[str]:
    """The same for a tokenizer loaded from `source`: the `auto_map` its tokenizer_config.json held is kept in its
    init arguments and saved again, beside the AutoTokenizer entry its class writes; only that entry is kept."""
    saved = getattr(tokenizer, "init_kwargs", {})
    if "auto_map" not in saved:
        return []
    own = {"AutoTokenizer": AUTO_MAP["AutoTokenizer"]}
    dropped = _foreign_auto_map_entries(saved["auto_map"], own)
    saved["auto_map"] = copy.deepcopy(own)
    _warn(dropped, source, "tokenizer config")
    return dropped


def _foreign_auto_map_entries(auto_map, own: dict) -> list[str]:
    """The entries of a loaded `auto_map` that are not in `own` as they are there, in words."""
    if auto_map is None:
        return []
    if not isinstance(auto_map, dict):
        return [f"auto_map {auto_map!r}"]
    return [f"auto_map {name} -> {value!r}" for name, value in auto_map.items()
            if _plain(value) != _plain(own.get(name))]


def _warn(dropped: list[str], source: str, what: str) -> None:
    for entry in dropped:
        logger.warning(f"WARNING: {source}: dropped {entry} from the {what}: it points to code this project did not "
                       "write, which trust_remote_code=True would run from the saved folder.")


def _plain(value):
    """An entry as JSON holds it (a tokenizer's pair is a list there, a tuple in memory)."""
    return list(value) if isinstance(value, tuple) else value


__all__ = ["keep_own_code_references", "keep_own_tokenizer_code_references"]
