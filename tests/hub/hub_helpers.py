"""What the publishing tests share beyond helpers.py: the command, the files a published folder holds, a results file
to publish with, and a fake Hub behind huggingface_hub's HTTP transport."""

import base64
import json

import httpx2

from helpers import load_script
from vaswani.remote_code.modeling_vaswani import code_files_to_ship
from vaswani.runs.manifests import MANIFEST_FILE


push_to_hub = load_script("push_to_hub")


REPO_ID = "someone/vaswani-tiny-en-de"
CODE_FILES = {path.name for path in code_files_to_ship()}  # the package's remote_code/ folder
EXPECTED_FILES = CODE_FILES | {
    "README.md", "config.json", "generation_config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
}
RESULTS = {
    "model": "runs/tiny",
    "task": "translation",
    "dataset": {"name": "bentrevett/multi30k", "config": None, "split": "test", "columns": {"source": "en", "target": "de"},
                "num_examples": 1000},
    "decoding": {"num_beams": 4, "length_penalty": 0.6, "max_new_tokens": 64},
    "metrics": [
        {"type": "sacrebleu", "name": "sacreBLEU", "value": 12.34, "signature": "nrefs:1|case:mixed|tok:13a"},
        {"type": "tokenized_bleu", "name": "BLEU (tokenized, lowercased)", "value": 14.56, "signature": "moses|lc"},
    ],
    "conventions": "Beam 4, length penalty 0.6, no checkpoint averaging.",
    "time_seconds": 1.5,
    "created": "2026-11-22T10:00:00Z",
}


def files_of(folder) -> dict[str, bytes]:
    """What a folder holds for the Hub: its files but its manifest (the local record of what the command wrote there,
    never uploaded)."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in folder.rglob("*")
            if path.is_file() and path.name != MANIFEST_FILE}


def run(args):
    return push_to_hub.main(args)


class FakeHub:
    """Answers the requests that `create_repo` and `upload_folder` send, as the Hub does, and keeps what they carry:
    small files arrive base64-encoded in the commit, the weights through the LFS protocol (a PUT of the bytes)."""

    def __init__(self, files_already_there=(), repo_id: str = REPO_ID, repo_type: str = "model"):
        self.files_already_there = list(files_already_there)
        self.repo_id = repo_id
        # where the Hub serves a repository of that type: /api/models/ID, /ID.git; /api/spaces/ID, /spaces/ID.git
        self.api = f"/api/{repo_type}s/{repo_id}"
        self.git = f"/{repo_id}.git" if repo_type == "model" else f"/{repo_type}s/{repo_id}.git"
        self.requests: list[tuple[str, str]] = []
        self.created: dict | None = None
        self.authorizations: set[str] = set()
        self.lfs_uploads: dict[str, bytes] = {}
        self.commit: list[dict] = []
        self.validated_cards: list[str] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        method, path = request.method, request.url.path
        self.requests.append((method, path))
        if request.url.host == "lfs-storage.test" and method == "PUT":
            self.lfs_uploads[path.rsplit("/", 1)[-1]] = request.read()
            return httpx2.Response(200)
        self.authorizations.add(request.headers.get("authorization", ""))
        if method == "POST" and path == "/api/repos/create":
            self.created = json.loads(request.read())
            return httpx2.Response(200, json={"url": f"https://huggingface.co/{self.repo_id}", "id": "1"})
        if method == "POST" and path == "/api/validate-yaml":  # the Hub checks a README's metadata before the upload
            self.validated_cards.append(json.loads(request.read())["content"])
            return httpx2.Response(200, json={"errors": [], "warnings": []})
        if method == "POST" and path == f"{self.api}/preupload/main":
            files = json.loads(request.read())["files"]
            return httpx2.Response(200, json={"files": [
                {"path": f["path"], "uploadMode": "lfs" if f["path"].endswith(".safetensors") else "regular",
                 "shouldIgnore": False} for f in files
            ]})
        if method == "POST" and path == f"{self.git}/info/lfs/objects/batch":
            objects = json.loads(request.read())["objects"]
            return httpx2.Response(200, json={"transfer": "basic", "objects": [
                {"oid": o["oid"], "size": o["size"],
                 "actions": {"upload": {"href": f"https://lfs-storage.test/upload/{o['oid']}"}}} for o in objects
            ]})
        if method == "GET" and path.startswith(f"{self.api}/tree/"):
            return httpx2.Response(200, json=[
                {"type": "file", "path": name, "oid": "0" * 40, "size": 1} for name in self.files_already_there
            ])
        if method == "POST" and path == f"{self.api}/commit/main":
            self.commit = [json.loads(line) for line in request.read().decode().splitlines() if line.strip()]
            return httpx2.Response(200, json={"commitUrl": f"https://huggingface.co/{self.repo_id}/commit/abc123",
                                              "commitOid": "abc123" + "0" * 34})
        return httpx2.Response(404, json={"error": f"the fake Hub does not serve {method} {path}"})

    def received_files(self) -> dict[str, bytes]:
        """Every file of the commit with its content: inline, or the LFS upload its sha256 names."""
        files = {}
        for item in self.commit:
            if item["key"] == "file":
                files[item["value"]["path"]] = base64.b64decode(item["value"]["content"])
            elif item["key"] == "lfsFile":
                files[item["value"]["path"]] = self.lfs_uploads[item["value"]["oid"]]
        return files

    def deleted_files(self) -> list[str]:
        return [item["value"]["path"] for item in self.commit if item["key"] == "deletedFile"]
