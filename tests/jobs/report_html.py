"""A report page read back for the tests: its <img> sources and its text (the reports are one self-contained page)."""
from __future__ import annotations

import html.parser


class ReportPage(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.images, self.text = [], []

    @property
    def sources(self) -> list[str]:
        return self.images

    def handle_starttag(self, tag, attrs):
        if tag == "img":
            self.images.append(dict(attrs)["src"])

    def handle_data(self, data):
        self.text.append(data)
