"""The raw drop's closing marker, `<drop>/_SUCCESS`: empty, or a manifest of each file's size, rows and SHA-256.

Whoever lands a drop writes the marker last, so its presence means "complete". With a manifest, prepare also checks
that each file is the one that was landed: a copy cut short (a failed multipart upload, a half-synced folder) or a
file replaced after the drop closed fails clearly instead of losing rows quietly. An empty marker (Hadoop's own, or a
`touch`) is accepted as unverified. Standard library only: the lander and any upstream tool can write it.
"""
from __future__ import annotations

import hashlib
import json
from typing import Mapping

DROP_MARKER = "_SUCCESS"
FORMAT = "rossmann-drop/1"


def data_rows(content: bytes) -> int:
    """Rows as prepare counts them (features.validate.FileDigest): non-blank lines, LF or CRLF, header excluded."""
    return max(0, sum(1 for line in content.split(b"\n") if line.strip()) - 1)


def manifest_bytes(files: Mapping[str, bytes]) -> bytes:
    """The marker for a drop holding exactly these files (name -> content)."""
    entries = {name: {"bytes": len(content), "rows": data_rows(content), "sha256": hashlib.sha256(content).hexdigest()}
               for name, content in sorted(files.items())}
    return json.dumps({"format": FORMAT, "files": entries}, indent=1).encode()


def parse_manifest(marker: bytes, marker_uri: str) -> dict[str, dict] | None:
    """name -> {"bytes", "sha256", "rows" (None if not listed)} from a marker; None for an empty marker (an
    unverified drop)."""
    if not marker.strip():
        return None
    try:
        document = json.loads(marker)
        if document.get("format") != FORMAT:
            raise ValueError(f"format {document.get('format')!r}, expected {FORMAT!r}")
        return {name: {"bytes": int(entry["bytes"]), "sha256": str(entry["sha256"]),
                       "rows": None if entry.get("rows") is None else int(entry["rows"])}
                for name, entry in document["files"].items()}
    except (ValueError, KeyError, TypeError, AttributeError) as error:
        raise ValueError(f"{marker_uri}: the drop marker is neither empty nor a {FORMAT} manifest ({error}); "
                         "write it empty or with rossmann_jobs.features.drop_manifest.manifest_bytes") from error


def mismatches(manifest: Mapping[str, Mapping], observed: Mapping[str, Mapping]) -> list[str]:
    """One line per observed file (name -> {"bytes", "rows", "sha256"}) that the manifest lists otherwise, or not
    at all."""
    problems = []
    for name, seen in sorted(observed.items()):
        expected = manifest.get(name)
        if expected is None:
            problems.append(f"{name}: not listed in the manifest")
        elif (seen["bytes"], seen["sha256"]) != (expected["bytes"], expected["sha256"]):
            rows = "" if expected.get("rows") is None else f"{seen['rows']:,} rows, "
            listed = "" if expected.get("rows") is None else f"{expected['rows']:,} rows, "
            problems.append(f"{name}: {rows}{seen['bytes']:,} bytes (sha256 {seen['sha256'][:12]}...), but the "
                            f"manifest lists {listed}{expected['bytes']:,} bytes (sha256 {expected['sha256'][:12]}...)")
    return problems
