"""Model configs uploaded through the dashboard: checked before anything is written, kept outside
the checkout (a private folder under the system temp dir, or $KVSIM_UPLOAD_DIR) and bounded in
number, so uploads never pile up in the repository or fill a disk."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from models.safe_json import loads
from models.spec import MAX_CONFIG_BYTES, UNREAD_FIELDS, ModelSpec, SpecError, spec_from_config

UPLOAD_ENV = "KVSIM_UPLOAD_DIR"
MAX_KEPT = 256  # configs kept; the oldest go first


def upload_dir() -> Path:
    return Path(os.environ.get(UPLOAD_ENV) or Path(tempfile.gettempdir()) / f"kvsim-configs-{os.getuid()}")


def store_config(data: bytes, name: str) -> tuple[Path, ModelSpec]:
    """Validate an uploaded config.json (SpecError naming `name`, never a server path), then keep it
    by content hash. Returns the stored path (what a Scenario's `model` holds) and its spec."""
    if len(data) > MAX_CONFIG_BYTES:
        raise SpecError(f"{name}: {len(data):,} bytes is over the {MAX_CONFIG_BYTES:,}-byte config limit")
    cfg = loads(data, error=SpecError, source=name, nonfinite_fields=UNREAD_FIELDS)
    spec = spec_from_config(cfg, source=name)  # raises before anything touches the disk
    folder = upload_dir()
    try:
        folder.mkdir(mode=0o700, parents=True, exist_ok=True)
        path = folder / f"{hashlib.sha256(data).hexdigest()[:32]}.json"
        if not path.exists():
            tmp = path.with_suffix(".tmp")
            tmp.write_bytes(data)
            tmp.replace(path)
        _prune(folder)
    except OSError as exc:
        raise SpecError(f"{name}: the server cannot keep uploaded configs ({exc.strerror or type(exc).__name__})") from None
    return path, spec


def _prune(folder: Path) -> None:
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for old in files[:-MAX_KEPT]:
        old.unlink(missing_ok=True)
