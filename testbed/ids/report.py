"""The HTML form of the IDS reports (coverage, detect): their Markdown, line by line.

`markdown_html(md, title) -> str` knows the few shapes those reports write: `#`/`##`/`###` headings,
`- ` items, `|` tables (the `|---|` line dropped) and fenced lines; everything else becomes a
preformatted line.
"""

from __future__ import annotations

import html

STYLE = (
    "body{font-family:sans-serif;max-width:70em;margin:auto}td{border:1px solid #ccc;padding:2px 6px}"
    "table{border-collapse:collapse}"
)


def markdown_html(md: str, title: str) -> str:
    body = []
    in_table = False
    for line in md.splitlines():
        if line.startswith("|"):
            cells = [html.escape(c.strip()) for c in line.strip("|").split("|")]
            if set("".join(cells)) <= set("-"):
                continue
            if not in_table:
                body.append("<table>")
                in_table = True
            body.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
            continue
        if in_table:
            body.append("</table>")
            in_table = False
        if line.startswith("### "):
            body.append(f"<h3>{html.escape(line[4:])}</h3>")
        elif line.startswith("## "):
            body.append(f"<h2>{html.escape(line[3:])}</h2>")
        elif line.startswith("# "):
            body.append(f"<h1>{html.escape(line[2:])}</h1>")
        elif line.startswith("- "):
            body.append(f"<p>{html.escape(line[2:])}</p>")
        elif line and line != "```":
            body.append(f"<pre>{html.escape(line)}</pre>")
    if in_table:
        body.append("</table>")
    return (
        f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}</title>"
        f"<style>{STYLE}</style></head><body>{''.join(body)}</body></html>\n"
    )
