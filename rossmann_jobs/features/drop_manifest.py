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


class FileDigest:
    """Streamed over a raw file once: SHA-256, size, the head (for the header check) and the number of data rows.

    Rows are counted as Spark's CSV reader sees them (one per line that is not blank, LF or CRLF, header
    excluded), which makes the count the independent side of the row accounting.
    """

    def __init__(self, head_bytes: int = 64 * 1024):
        self._sha256, self._head_bytes = hashlib.sha256(), head_bytes
        self.head, self.size, self._lines, self._carry = b"", 0, 0, b""

    def update(self, chunk: bytes) -> None:
        self._sha256.update(chunk)
        self.size += len(chunk)
        self.head += chunk[:max(0, self._head_bytes - len(self.head))]
        lines = (self._carry + chunk).split(b"\n")
        self._carry = lines.pop()
        self._lines += sum(1 for line in lines if line.strip())

    @property
    def sha256(self) -> str:
        return self._sha256.hexdigest()

    @property
    def data_rows(self) -> int:
        lines = self._lines + (1 if self._carry.strip() else 0)
        return max(0, lines - 1)


def manifest_bytes(files: Mapping[str, bytes]) -> bytes:
    """The marker for a drop holding exactly these files (name -> content)."""
    entries = {}
    for name, content in sorted(files.items()):
        digest = FileDigest()
        digest.update(content)
        entries[name] = {"bytes": digest.size, "rows": digest.data_rows, "sha256": digest.sha256}
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
