"""One self-contained HTML page of PNG plots (matplotlib Agg): the parts the forecast and the scores reports share.

The PNGs are embedded as data: URIs, so the single index.html object opens straight from S3 (a presigned link,
the console, a download) with nothing else to fetch.
"""
from __future__ import annotations

import base64
import html
import io
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen before pyplot loads)

__all__ = ["embedded_png", "format_value", "html_table", "page", "plt", "png_bytes"]


def png_bytes(figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    plt.close(figure)
    return buffer.getvalue()


def embedded_png(png: bytes, alt: str) -> str:
    """An <img> carrying its PNG as a data: URI."""
    return f'<img src="data:image/png;base64,{base64.b64encode(png).decode("ascii")}" alt="{html.escape(alt)}">'


def format_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, dict):
        return ", ".join(f"{k}: {format_value(v)}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return " to ".join(format_value(v) for v in value)
    return "n/a" if value is None else str(value)


def html_table(rows: list[tuple[str, Any]]) -> str:
    body = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(format_value(v))}</td></tr>" for k, v in rows)
    return f"<table>{body}</table>"


def page(title: str, sections: list[tuple[str, str]]) -> str:
    """The report page: a title and (heading, HTML fragment) sections; fragments are trusted HTML, escape values
    with html_table/html.escape."""
    body = "\n".join(f"<h2>{html.escape(heading)}</h2>\n{fragment}" for heading, fragment in sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
th,td{{border:1px solid #ccc;padding:4px 10px;text-align:left}}img{{max-width:100%}}</style></head>
<body>
<h1>{html.escape(title)}</h1>
{body}
</body></html>
"""
