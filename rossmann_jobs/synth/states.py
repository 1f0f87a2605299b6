"""German states as the Rossmann files name them: state_names rows, store-state shares, Google-trend file codes."""
from __future__ import annotations

# state_names.csv, in the real file's order. Niedersachsen carries the merged code "HB,NI" (Bremen + Lower Saxony).
STATE_NAMES: tuple[tuple[str, str], ...] = (
    ("BadenWuerttemberg", "BW"), ("Bayern", "BY"), ("Berlin", "BE"), ("Brandenburg", "BB"), ("Bremen", "HB"),
    ("Hamburg", "HH"), ("Hessen", "HE"), ("MecklenburgVorpommern", "MV"), ("Niedersachsen", "HB,NI"),
    ("NordrheinWestfalen", "NW"), ("RheinlandPfalz", "RP"), ("Saarland", "SL"), ("Sachsen", "SN"),
    ("SachsenAnhalt", "ST"), ("SchleswigHolstein", "SH"), ("Thueringen", "TH"),
)
STATE_CODES: tuple[str, ...] = tuple(code for _name, code in STATE_NAMES)

# The 12 codes stores live in, with store counts close to the real store_states.csv (they sum to 1,115).
# HB,NI comes first so that even a tiny data set shows the quoted code.
STORE_STATE_COUNTS: dict[str, int] = {
    "HB,NI": 73, "NW": 284, "BY": 180, "HE": 112, "SH": 109, "BW": 92, "BE": 84, "TH": 82, "SN": 75, "ST": 56,
    "RP": 40, "HH": 28,
}

# googletrend.csv files: Rossmann_DE plus one per code; NI stands for HB,NI. SL has a trend but no stores.
TREND_NATIONAL = "Rossmann_DE"
TREND_STATE_CODES: tuple[str, ...] = ("BE", "BW", "BY", "HE", "HH", "NI", "NW", "RP", "SH", "SL", "SN", "ST", "TH")


def trend_code(state_code: str) -> str:
    """The googletrend file suffix for a state code (the reference pipeline maps NI back to HB,NI)."""
    return "NI" if state_code == "HB,NI" else state_code


def trend_file_names() -> list[str]:
    return [TREND_NATIONAL] + [f"{TREND_NATIONAL}_{code}" for code in TREND_STATE_CODES]
