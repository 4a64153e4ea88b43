"""What a lent GPU machine lacks to run the GPU suite (vaswani_tools.gpu_suite), gathered by
scripts/tools/gather_gpu_wheels.py into folders of the checkout that the device call carries: the wheels of the
packages the machine lacks (CARRIED, checked against what it has, DEVICE_HAS), this checkout's own wheel, and the
Multi30k files of the suite's recipe part; and the size of what the call sends, against its limit.
"""

import importlib.metadata
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from vaswani.output_paths import OutputFolder

MULTI30K_FILES = ("train.jsonl", "validation.jsonl", "test_2016_flickr.jsonl")
TRAVEL_LIMIT_MIB = 64  # the device tool's limit on the tree a call sends

# What the machine lacks (or has in a version this project cannot use), and why it is carried.
CARRIED = {
    "transformers": "the machine has 5.17; pyproject.toml asks for >=5.23",
    "regex": "transformers 5.24 checks regex>=2025.10.22 when imported; the machine's version is not known",
    "datasets": "missing", "dill": "missing (datasets)", "multiprocess": "missing (datasets)",
    "fsspec": "datasets pins fsspec<=2026.9.0; the machine's version is not known",
    "evaluate": "missing", "sacremoses": "missing (tokenized BLEU)",
    "rouge-score": "missing (ROUGE)", "nltk": "missing (rouge-score)", "defusedxml": "missing (nltk)",
    "deepspeed": "missing (the engines part)", "hjson": "missing (deepspeed)", "pydantic": "missing (deepspeed)",
    "pydantic-core": "missing (pydantic)", "annotated-types": "missing (pydantic)",
    "typing-inspection": "missing (pydantic)",
}
PINNED = {"deepspeed": "0.19.8", "hjson": "3.1.0"}  # where this environment does not have them
SOURCE_ONLY = {"deepspeed", "rouge-score"}  # no wheel on the registry: built here (pure Python)

# The Python packages of the machine's image, as the device tool's KINDS.md lists them (read there 2026-11-17).
DEVICE_HAS = frozenset(canonicalize_name(name) for name in """
absl-py accelerate aiofiles aiohappyeyeballs aiohttp aiosignal annotated-doc anyio attrs botorch build certifi
charset-normalizer chex click cloudpickle cmake colorama contourpy coverage cuda-bindings cuda-core cuda-pathfinder
cuda-toolkit cupy-cuda13x cycler cython diffrax e3nn einops equinox etils execnet filelock flatbuffers flax fonttools
formulaic frozenlist fsspec gpytorch grpcio h11 h5py hf-xet httpcore httpx huggingface-hub humanize hypothesis idna
imageio iniconfig interface-meta jax jax-cuda13-pjrt jax-cuda13-plugin jaxlib jaxtyping jinja2 joblib kiwisolver
lazy-loader lightning lightning-utilities linear-operator lineax llvmlite lxml markdown markdown-it-py markupsafe
matplotlib mdurl meson ml-dtypes mpi4py mpmath msgpack multidict multipledispatch mypy-extensions nanobind narwhals
networkx ninja numba numba-cuda numpy numpyro nvidia-cublas nvidia-cuda-cupti nvidia-cuda-nvrtc nvidia-cuda-runtime
nvidia-cudnn-cu13 nvidia-cufft nvidia-cufile nvidia-curand nvidia-cusolver nvidia-cusparse nvidia-cusparselt-cu13
nvidia-ml-py nvidia-nccl-cu13 nvidia-nvjitlink nvidia-nvshmem-cu13 nvidia-nvtx onnx onnx-ir onnxruntime onnxscript
opencv-python-headless optax opt-einsum opt-einsum-fx optimistix orbax-checkpoint packaging pandas pathspec patsy peft
pillow pip pluggy portalocker prometheus-client propcache protobuf psutil pyarrow pybind11 py-cpuinfo pygments
pyparsing pyproject-hooks pyre-extensions pytest pytest-benchmark pytest-cov pytest-mock pytest-timeout pytest-xdist
python-dateutil pytorch-lightning pyyaml regex requests rich sacrebleu safetensors scikit-build-core scikit-image
scikit-learn scipy seaborn sentencepiece sentence-transformers setuptools shellingham simplejson six sortedcontainers
statsmodels sympy tabulate tensorboard tensorboard-data-server tensorstore threadpoolctl tifffile tiktoken timm
tokenizers toolz torch torchaudio torchdiffeq torch-geometric torchmetrics torchvision tqdm transformers treescope
triton typer typing-extensions typing-inspect urllib3 uvloop wadler-lindig werkzeug wheel wrapt xarray xxhash yarl
zipp
""".split())

PYTHON_VERSION = "3.12"  # the machine's interpreter: pip picks binary wheels for it, requirements' markers use it
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64")


def _carried_versions() -> dict[str, str]:
    """name -> version of each carried package: this environment's, else PINNED's."""
    versions = {}
    for name in CARRIED:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if name not in PINNED:
                raise ValueError(f"{name} is neither installed here nor pinned in PINNED: install it (pip install "
                                 f"{name}) or pin a version.") from None
            versions[name] = PINNED[name]
    return versions


def _pip(*arguments: str, env: dict | None = None) -> None:
    subprocess.run([sys.executable, "-m", "pip", *arguments], check=True, env=env)


def _download_wheels(versions: dict[str, str], wheel_dir: Path, python_version: str) -> None:
    """The registry's wheels for the machine's Python, and wheels built here of the packages published as source
    only (DeepSpeed without its compiled ops: DS_BUILD_OPS=0)."""
    binary = [f"{name}=={version}" for name, version in versions.items() if name not in SOURCE_ONLY]
    platforms = [option for platform in PLATFORMS for option in ("--platform", platform)]
    _pip("download", "--quiet", "--no-deps", "--only-binary=:all:", "--python-version", python_version,
        "--implementation", "cp", *platforms, "--dest", str(wheel_dir), *binary)
    source = [f"{name}=={version}" for name, version in versions.items() if name in SOURCE_ONLY]
    _pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheel_dir), *source,
        env={**os.environ, "DS_BUILD_OPS": "0"})


def build_project_wheel(wheel_dir: Path, repo: Path) -> Path:
    """The checkout `repo` as a wheel (vaswani-transformer), built without fetching anything."""
    _pip("wheel", "--quiet", "--no-deps", "--no-build-isolation", "--wheel-dir", str(wheel_dir), str(repo))
    return next(wheel_dir.glob("vaswani_transformer-*.whl"))


def _wheel_metadata(wheel: Path) -> tuple[str, list[Requirement]]:
    """The distribution name and requirements of a wheel, from its METADATA."""
    with zipfile.ZipFile(wheel) as archive:
        metadata = next(name for name in archive.namelist() if name.endswith(".dist-info/METADATA"))
        lines = archive.read(metadata).decode("utf-8").splitlines()
    name = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("Name:"))
    requirements = [Requirement(line.split(":", 1)[1].strip()) for line in lines if line.startswith("Requires-Dist:")]
    return canonicalize_name(name), requirements


def unmet_requirements(wheels: list[Path], python_version: str = PYTHON_VERSION) -> list[str]:
    """'wheel needs requirement' for each requirement (extras left out; markers for that Python on x86-64 Linux)
    that is neither among the wheels nor on the machine. Versions of the machine's packages are not known here."""
    environment = {**default_environment(), "python_version": python_version,
                   "python_full_version": f"{python_version}.0", "sys_platform": "linux", "platform_system": "Linux",
                   "platform_machine": "x86_64", "extra": ""}
    metadata = dict(_wheel_metadata(wheel) for wheel in wheels)
    unmet = []
    for name, requirements in metadata.items():
        for requirement in requirements:
            if requirement.marker is not None and not requirement.marker.evaluate(environment):
                continue
            needed = canonicalize_name(requirement.name)
            if needed not in metadata and needed not in DEVICE_HAS:
                unmet.append(f"{name} needs {requirement}")
    return unmet


def duplicated(wheels: list[Path]) -> list[str]:
    """Names of which there are several wheels: pip would refuse the whole install on the machine."""
    names = [_wheel_metadata(wheel)[0] for wheel in wheels]
    return sorted({name for name in names if names.count(name) > 1})


def _copy_multi30k(source: Path, destination: Path) -> None:
    missing = [name for name in MULTI30K_FILES if not (source / name).is_file()]
    if missing:
        raise FileNotFoundError(f"--multi30k_dir {source} lacks {', '.join(missing)}: name the folder of the Multi30k "
                                "JSON Lines files, or pass --no_data.")
    destination.mkdir(parents=True, exist_ok=True)
    for name in MULTI30K_FILES:
        shutil.copyfile(source / name, destination / name)


def _travelling_bytes(carried: list[Path], repo: Path) -> int:
    """What a device call sends: the checkout's tracked files, its untracked files that git does not ignore, and the
    carried folders."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=repo,
                            check=True, capture_output=True).stdout.decode().split("\0")
    files = [repo / name for name in listed if name]
    files += [path for folder in carried for path in folder.rglob("*")]
    return sum(path.stat().st_size for path in files if path.is_file())


def _mib(size: int) -> str:
    return f"{size / 2**20:.1f} MiB"


def gather(args, repo: Path) -> None:
    """Gather the wheels into --wheel_dir and (unless --no_data) the Multi30k files into repo/.data, check that they
    would install on the lent machine, and that the device call stays under its limit (`args`: the command's
    options; `repo`: the checkout)."""
    wheel_dir, data_dir = Path(args.wheel_dir), repo / ".data"
    # the folder is written whole, as every command's output (vaswani.output_paths): an earlier gathering is replaced
    # only with --overwrite_output_dir, and only where it holds what that gathering wrote (its manifest) and nothing
    # of the user's (one version of each package: two would stop the install on the machine)
    with OutputFolder(wheel_dir, {"--multi30k_dir": None if args.no_data else args.multi30k_dir}, option="--wheel_dir",
                      overwrite=args.overwrite_output_dir) as output:
        with output.publish() as staging:
            _download_wheels(_carried_versions(), staging, args.python_version)
            build_project_wheel(staging, repo)
            staged = sorted(staging.glob("*.whl"))
            problems = [f"several wheels of {name}" for name in duplicated(staged)]
            problems += unmet_requirements(staged, args.python_version)
            if problems:
                raise ValueError("the gathered wheels would not work on the lent machine: " + "; ".join(problems))
    wheels = sorted(wheel_dir.glob("*.whl"))
    if not args.no_data:
        _copy_multi30k(Path(args.multi30k_dir), data_dir / "multi30k")
    for wheel in wheels:
        print(f"{_mib(wheel.stat().st_size):>10}  {wheel.name}")
    carried = [folder for folder in (wheel_dir, data_dir) if folder.is_relative_to(repo) and folder.is_dir()]
    carried_size = sum(path.stat().st_size for folder in carried for path in folder.rglob("*") if path.is_file())
    total = _travelling_bytes(carried, repo)
    print(f"carried: {_mib(carried_size)} ({', '.join(folder.name for folder in carried)}); the device call sends "
          f"{_mib(total)} of at most {TRAVEL_LIMIT_MIB} MiB")
    if total > TRAVEL_LIMIT_MIB * 2**20:
        raise ValueError(f"the device call would send {_mib(total)}, over its {TRAVEL_LIMIT_MIB} MiB: {set_aside_advice(repo)}")


def set_aside_advice(repo: Path) -> str:
    """What to leave out of a device call from the checkout `repo`: the shipped models' weights, which the GPU suite
    does not read, except the en->de model's (its generation part decodes with it)."""
    kept = repo / "results" / "multi30k_en_de" / "model" / "model.safetensors"
    weights = sorted(path for path in repo.glob("results/*/model/model.safetensors") if path != kept)
    if not weights:
        return "carry less"
    size = sum(path.stat().st_size for path in weights)
    names = " ".join(str(path.relative_to(repo)) for path in weights)
    return (f"the shipped models' weights but the en->de model's ({len(weights)} files, {_mib(size)}) are not needed "
            f"there: delete them for the call (`rm {names}`) and restore them after it (`git checkout -- results`)")


__all__ = [
    "CARRIED",
    "DEVICE_HAS",
    "PYTHON_VERSION",
    "build_project_wheel",
    "duplicated",
    "gather",
    "set_aside_advice",
    "unmet_requirements",
]
