"""The raw drop's closing marker, `<drop>/_SUCCESS`: empty, or a manifest of each file's size, rows and SHA-256.

Whoever lands a drop writes the marker last, so its presence means "complete". With a manifest, prepare also checks
that each file is the one that was landed: a copy cut short (a failed multipart upload, a half-synced folder) or a
file replaced after the drop closed fails clearly instead of losing rows quietly. An empty marker (Hadoop's own, or a
`touch`) is accepted as unverified. Standard library only: the lander and any upstream tool can write it.
"""
from __future__ import annotations

import codecs
import hashlib
import json
import re
from dataclasses import dataclass
from typing import Mapping

from rossmann_jobs.commit_protocol import MANIFEST_NAME

# A drop closes as a job's output commits: with one `_SUCCESS` object written last (its own manifest format, FORMAT).
DROP_MARKER = MANIFEST_NAME
FORMAT = "rossmann-drop/1"

_LINE_END = re.compile(rb"\r\n|[\r\n]")
_BLANK = bytes(range(0x21))   # what the CSV parser (univocity) treats as whitespace: every byte <= ' '
# Bytes no text export holds: C0 controls other than tab, LF and CR, and DEL. Ctrl-Z (0x1A) is allowed only as the
# file's last bytes (a DOS end-of-file marker), see FileDigest._check_text.
_CONTROL = bytes(set(range(0x20)) - {0x09, 0x0A, 0x0D, 0x1A}) + b"\x7f"
_CONTROL_OR_CTRL_Z = re.compile(b"[" + re.escape(_CONTROL + b"\x1a") + b"]")


@dataclass(frozen=True)
class Corruption:
    """Where a file stops being text: what was found, its byte offset, line number and the bytes around it."""

    what: str
    offset: int
    line: int
    excerpt: bytes

    def describe(self) -> str:
        return (f"{self.what} from byte {self.offset:,} (line {self.line:,}), around {self.excerpt!r}")


class FileDigest:
    """Streamed over a raw file once: SHA-256, size, the head (for the header check), the number of data rows and
    the first sign of corruption (see `corruption`).

    Rows are counted as Spark's CSV reader sees them, which makes the count the independent side of the row
    accounting: Hadoop's line reader ends a line at LF, CRLF or a lone CR (Excel for Mac), and the CSV parser skips
    a line whose characters are all <= ' ' (so also a DOS end-of-file Ctrl-Z on a line of its own); header excluded.
    """

    def __init__(self, head_bytes: int = 64 * 1024):
        self._sha256, self._head_bytes = hashlib.sha256(), head_bytes
        self.head, self.size, self._lines, self._carry = b"", 0, 0, b""
        self._utf8 = codecs.getincrementaldecoder("utf-8")()
        self._line_ends = 0          # line ends seen so far, to tell where a corruption starts
        self._control = 0            # control bytes (NUL, other C0 codes, DEL) other than tab, CR, LF and Ctrl-Z
        self._ctrl_z = self._trailing_ctrl_z = 0
        self.corruption: Corruption | None = None

    def update(self, chunk: bytes) -> None:
        self._sha256.update(chunk)
        self._check_text(chunk)
        self.size += len(chunk)
        self.head += chunk[:max(0, self._head_bytes - len(self.head))]
        # A CRLF split between two chunks leaves an empty line, which is blank and not counted either way.
        lines = _LINE_END.split(self._carry + chunk)
        self._carry = lines.pop()
        self._line_ends += len(lines)
        self._lines += sum(1 for line in lines if line.strip(_BLANK))

    def _check_text(self, chunk: bytes) -> None:
        """Record the first byte of chunk that no text export holds: a control byte, or bytes that are not UTF-8."""
        control = len(chunk) - len(chunk.translate(None, _CONTROL))
        self._control += control
        ctrl_z = chunk.count(b"\x1a")
        self._ctrl_z += ctrl_z
        trailing = len(chunk) - len(chunk.rstrip(b"\x1a"))
        self._trailing_ctrl_z = self._trailing_ctrl_z + trailing if trailing == len(chunk) else trailing
        if self.corruption is not None:
            return
        interior_ctrl_z = self._ctrl_z - self._trailing_ctrl_z   # a Ctrl-Z followed by more data
        if control or interior_ctrl_z:
            match = _CONTROL_OR_CTRL_Z.search(chunk) if control or ctrl_z > trailing else None
            offset = match.start() if match else 0
            self._corrupt(chunk, offset, "control bytes (NUL or other binary data)")
            return
        try:
            self._utf8.decode(chunk)
        except UnicodeDecodeError as error:
            self._corrupt(chunk, error.start, "bytes that are not UTF-8 text")

    def _corrupt(self, chunk: bytes, offset: int, what: str) -> None:
        line = self._line_ends + len(_LINE_END.findall(chunk[:offset])) + 1
        self.corruption = Corruption(what, self.size + offset, line, chunk[max(0, offset - 40):offset + 40])

    @property
    def sha256(self) -> str:
        return self._sha256.hexdigest()

    @property
    def data_rows(self) -> int:
        lines = self._lines + (1 if self._carry.strip(_BLANK) else 0)
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
