"""Drop verification: what every job checks about the raw files it reads, in one place.

prepare inspects each file once (presence, header, text, SHA-256, row count), checks the files against the drop's
_SUCCESS manifest (features/drop_manifest.py) and digests them again after Spark read them; score checks the
train.csv it scored against the manifest; predict checks the test.csv it forecast against the SHA-256 prepare
recorded in metadata.json. Each caller names the error class its job exits with.
"""
from __future__ import annotations

import logging
from typing import Any

from rossmann_jobs import storage
from rossmann_jobs.features import drop_settings
from rossmann_jobs.features.drop_manifest import DROP_MARKER, mismatches, parse_manifest
from rossmann_jobs.features.raw_schemas import RAW_FILES, RawFile
from rossmann_jobs.features.validate import FileDigest, RawInputError, header_report, parse_header

log = logging.getLogger("rossmann.drop_verification")


def inspect_raw_files(raw_uri: str) -> dict[str, dict[str, Any]]:
    """Presence, header, checksum and data-row count of every raw file (one streamed read each)."""
    kinds = {name: storage.file_type(storage.join(raw_uri, name)) for name in RAW_FILES}
    missing = [name for name, kind in kinds.items() if kind is None]
    if missing:
        raise RawInputError(f"{', '.join(missing)}: missing from the raw drop {raw_uri} (it must hold "
                            f"{', '.join(RAW_FILES)}). Check the landing task for this date.")
    for name in (name for name, kind in kinds.items() if kind == storage.DIRECTORY):
        raise RawInputError(folder_not_file(storage.join(raw_uri, name), name))
    inspected = {name: inspect_file(storage.join(raw_uri, name), raw_file) for name, raw_file in RAW_FILES.items()}
    empty = [name for name, facts in inspected.items() if facts["rows"] == 0]
    if empty:
        raise RawInputError(f"{', '.join(empty)}: the file has a header but no data rows ({raw_uri}).")
    return inspected


def folder_not_file(uri: str, name: str) -> str:
    """The error for a raw file that is a folder (a Spark or Hadoop job's output: part files, _SUCCESS)."""
    entries = sorted(entry[len(uri.rstrip("/")) + 1:] for entry in storage.list_files(uri))
    parts = [entry for entry in entries if entry.rsplit("/", 1)[-1].startswith("part-")]
    shown = ", ".join(entries[:4]) + (", ..." if len(entries) > 4 else "")
    what = (f"{len(parts)} part files, as a Spark or Hadoop job writes its output" if parts else
            f"{len(entries)} entries")
    return (f"{name}: {uri} is a folder, not a file ({what}: {shown or 'empty'}). The drop must hold one CSV file "
            f"named {name} with one header line: merge the part files into it (e.g. coalesce(1) in the exporting "
            "Spark job and move the part file to that name, or concatenate the parts keeping the first header "
            "only), then land the drop again.")


def verify_against_manifest(raw_uri: str, inspected: dict[str, dict[str, Any]],
                allow_unverified: bool = drop_settings.ALLOW_UNVERIFIED_DROP) -> bool:
    """Each raw file against the drop's _SUCCESS manifest; False (logged) when the marker is empty or absent and
    allow_unverified, else such a drop is refused."""
    marker_uri = storage.join(raw_uri, DROP_MARKER)
    marker = storage.read_bytes(marker_uri) if storage.exists(marker_uri) else b""
    try:
        manifest = parse_manifest(marker, marker_uri)
    except ValueError as error:
        raise RawInputError(str(error)) from None
    if manifest is None:
        if not allow_unverified:
            raise RawInputError(f"{marker_uri} is empty or absent: {drop_settings.UNVERIFIED_DROP_WARNING}, and this "
                                "deployment allows no unverified drop (--no-allow-unverified-drop, the DAG param "
                                "allow_unverified_drop). Land the drop again closed by a manifest (rossmann_jobs."
                                "features.drop_manifest.manifest_bytes), then clear the task.")
        log.warning("%s is empty or absent: %s", marker_uri, drop_settings.UNVERIFIED_DROP_WARNING)
        return False
    problems = mismatches(manifest, inspected)
    if problems:
        raise RawInputError(f"{raw_uri}: the files are not the ones the drop's {DROP_MARKER} manifest lists, so a "
                            f"copy was cut short or a file changed after the drop closed: {'; '.join(problems)}. "
                            "Land the drop again, then clear the task.")
    log.info("all %d raw files match the drop's manifest %s", len(inspected), marker_uri)
    return True


def check_unchanged_since_inspected(raw_uri: str, inspected: dict[str, dict[str, Any]]) -> None:
    """Digest every raw file again after Spark read it: the features come from the files inspected (and verified),
    not from a drop landed anew in between."""
    changed = {}
    for name, facts in inspected.items():
        sha256, size = storage.sha256(storage.join(raw_uri, name))
        if sha256 != facts["sha256"]:
            changed[name] = (f"SHA-256 {facts['sha256']} ({facts['bytes']:,} bytes) when inspected, now {sha256} "
                             f"({size:,} bytes)")
    if changed:
        raise RawInputError(f"{raw_uri}: {', '.join(changed)} changed while prepare read the drop ("
                            f"{'; '.join(f'{name}: {what}' for name, what in changed.items())}): the drop was landed "
                            "again. Clear the task once the new drop is complete.")


def inspect_file(uri: str, raw_file: RawFile) -> dict[str, Any]:
    filesys, path = storage.filesystem(uri)
    digest = FileDigest()
    with filesys.open_input_stream(path) as stream:
        while chunk := stream.read(1 << 20):
            digest.update(chunk)
    header = parse_header(raw_file, digest.head)
    if digest.corruption is not None:
        # Refused, not quarantined: a block of NULs or garbage overwrites whole rows and their line ends, so the
        # rows it destroyed cannot be counted, let alone shown.
        raise RawInputError(f"{raw_file.name}: the file is corrupted, it holds {digest.corruption.describe()}: the "
                            "rows there cannot be read or counted. Copy the file again from its source (a bad copy "
                            "or disk), then clear the task.")
    report = header_report(raw_file, header)
    if report:
        log.warning("%s: %s", raw_file.name, "; ".join(
            f"{'ignored (not a column of the drop)' if key == 'ignored' else 'absent (not used, read as missing)'}: "
            f"{', '.join(names)}" for key, names in report.items()))
    return {"sha256": digest.sha256, "bytes": digest.size, "rows": digest.data_rows, "header": header,
            "columns": report}


def check_file_against_manifest(raw_uri: str, name: str, refusal: type[ValueError] = RawInputError,
                                then: str = "clear the task") -> bool:
    """The raw file a job read is the one the drop's _SUCCESS manifest lists (its SHA-256), checked after Spark read
    it: True when verified, False (warned) for a drop closed by an empty marker (nothing to check against). A
    mismatch raises refusal, whose message ends with then (what to clear)."""
    marker_uri = storage.join(raw_uri, DROP_MARKER)
    marker = storage.read_bytes(marker_uri) if storage.exists(marker_uri) else b""
    try:
        listed = (parse_manifest(marker, marker_uri) or {}).get(name)
    except ValueError as error:
        raise refusal(str(error)) from None
    if listed is None:
        log.warning("%s lists no %s: %s", marker_uri, name, drop_settings.UNVERIFIED_DROP_WARNING)
        return False
    uri = storage.join(raw_uri, name)
    sha256, size = storage.sha256(uri)
    if sha256 != listed["sha256"]:
        raise refusal(f"{uri}: SHA-256 {sha256} ({size:,} bytes), but the drop's manifest {marker_uri} lists "
                      f"{listed['sha256']} ({listed['bytes']:,} bytes): the file changed after the drop closed "
                      f"(landed again?). Land the drop again, then {then}.")
    return True


def check_file_against_metadata(raw_file_uri: str, metadata: dict, metadata_uri: str,
                                refusal: type[ValueError] = RawInputError) -> None:
    """The raw file predict read is the one prepare verified: its SHA-256 is the one metadata.json records
    (input_checksums). A drop landed anew after prepare would otherwise be forecast from a plan the features were
    not made from."""
    name = raw_file_uri.rstrip("/").rsplit("/", 1)[-1]
    recorded = (metadata.get("input_checksums") or {}).get(name)
    if not recorded:
        log.warning("%s records no SHA-256 of %s (features of an earlier prepare): the file is not checked",
                    metadata_uri, name)
        return
    sha256, size = storage.sha256(raw_file_uri)
    if sha256 != recorded["sha256"]:
        raise refusal(
            f"{raw_file_uri}: SHA-256 {sha256} ({size:,} bytes), but prepare verified and prepared the features from "
            f"{name} with SHA-256 {recorded['sha256']} ({recorded.get('bytes', 0):,} bytes; {metadata_uri}): the "
            "drop was landed again after prepare. Clear prepare_features and the tasks after it, so that the "
            "features and the forecast come from one drop.")
