"""The base of every JSON file one stage hands another (``metrics.json``, the run record, ``fold.json``,
the paper heartbeat): a typed, versioned, validated-on-read pydantic model.

Each file's model lives with the layer that writes it and subclasses :class:`Artifact`, which gives
it a ``schema_version`` field, :meth:`Artifact.parse` / :meth:`Artifact.read` (validation, with every
failure a one-line :class:`data.errors.ArtifactError` naming the file) and :meth:`Artifact.write`
(atomic, ``data.atomic``; NaN and infinities written as null). A file without ``schema_version`` was
written before the field existed and is read as version 1; a newer or unknown version is refused,
never guessed at. Keys a model does not declare are kept (``extra="allow"``): a file rewritten by a
reader that does not know a key still carries it.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Annotated, Any, ClassVar, Self

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from data.atomic import atomic_write_text
from data.errors import ArtifactError
from data.scrub import scrub

#: The key every artifact records its schema version under.
SCHEMA_KEY = "schema_version"


def _finite(value: float | None) -> float | None:
    return value if value is None or math.isfinite(value) else None


#: A figure: a finite number, or null where undefined (NaN and infinities read as null; a string or a
#: boolean is refused, not coerced).
Figure = Annotated[float | None, Field(strict=True), AfterValidator(_finite)]


class Artifact(BaseModel):
    """A versioned JSON file one stage writes and others read. Subclasses set :attr:`SCHEMA_VERSION`
    (the version this code writes and the newest it reads) and :attr:`FILE` (its name, for messages)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    SCHEMA_VERSION: ClassVar[int] = 1
    FILE: ClassVar[str] = "artifact"
    #: Write only the keys set (by the writer, or read from the file), not every default: for a file
    #: whose optional keys belong to some writers only (metrics.json's ``role`` is the nightly gate's).
    WRITE_SET_ONLY: ClassVar[bool] = False

    schema_version: int = Field(
        1, description="the file's schema version (absent in files written before it existed: 1)"
    )

    @classmethod
    def parse(cls, raw: Any, source: str | os.PathLike[str] | None = None) -> Self:
        """The model of the JSON value ``raw``; a newer or unknown schema version, or a malformed
        field, is a one-line :class:`ArtifactError` naming ``source`` (default: the file's name)."""
        where = str(source) if source is not None else cls.FILE
        if not isinstance(raw, dict):
            raise ArtifactError(f"{where}: expected a JSON object, found {type(raw).__name__}")
        version = raw.get(SCHEMA_KEY, 1)
        if isinstance(version, bool) or not isinstance(version, int) or version < 1:
            raise ArtifactError(
                f"{where}: unknown schema version {version!r} (this podracer reads 1 to {cls.SCHEMA_VERSION})"
            )
        if version > cls.SCHEMA_VERSION:
            raise ArtifactError(
                f"{where}: schema version {version} is newer than this podracer reads "
                f"({cls.SCHEMA_VERSION}): upgrade podracer to read it"
            )
        try:
            return cls.model_validate({**raw, SCHEMA_KEY: version})
        except ValidationError as err:
            raise ArtifactError(f"{where}: {_first_error(err)}") from None

    @classmethod
    def read(cls, path: str | os.PathLike[str]) -> Self:
        """The file at ``path``, validated; unreadable, not JSON or not valid -> one-line ArtifactError."""
        path = Path(path)
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise ArtifactError(f"{path}: no such file") from None
        except json.JSONDecodeError as err:
            raise ArtifactError(
                f"{path} is corrupt: not valid JSON ({err.msg} at line {err.lineno} column {err.colno})"
            ) from None
        except (OSError, UnicodeDecodeError) as err:
            raise ArtifactError(f"{path}: cannot be read ({getattr(err, 'strerror', None) or err})") from None
        return cls.parse(raw, path)

    def to_json(self) -> dict[str, Any]:
        """The document as written: JSON types only, NaN and infinities as null, the current version."""
        doc = json.loads(self.model_dump_json(exclude_unset=self.WRITE_SET_ONLY))
        doc[SCHEMA_KEY] = self.SCHEMA_VERSION
        return doc

    def write(self, path: str | os.PathLike[str]) -> Path:
        """Write the document to ``path`` atomically (readers see the old file or the new one), secrets
        masked (``data.scrub``: documents such as the heartbeat quote error texts)."""
        text = scrub(json.dumps(self.to_json(), indent=2, sort_keys=True))
        return atomic_write_text(path, text + "\n")


def _first_error(err: ValidationError) -> str:
    """The first problem pydantic found, as ``field.path: message (got value)``, on one line."""
    first = err.errors(include_url=False)[0]
    where = ".".join(str(p) for p in first["loc"]) or "the document"
    shown = repr(first.get("input"))
    shown = shown if len(shown) <= 40 else shown[:37] + "..."
    more = err.error_count() - 1
    tail = f" (and {more} more)" if more else ""
    return f"{where}: {first['msg'].lower()}, got {shown}{tail}"
