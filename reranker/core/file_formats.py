"""What an input file looks like when it is not the JSON Lines a reader expected: a CSV export or a TREC
SGML collection handed to `catalog load`, `publish --file`, `--data` or `data import-trec` gets one line
saying so, instead of only the JSON parser's "Expecting value"."""

from __future__ import annotations

BOM = b"\xef\xbb\xbf"  # a UTF-8 byte order mark: skipped at the start of every input file
_TREC_TAGS = {"DOC", "DOCNO", "DOCHDR", "TEXT", "HEAD", "HL", "TOP", "NUM", "TITLE", "DESC", "NARR"}


def not_jsonl_hint(line: str | bytes, first: bool) -> str:
    """For a line a JSON Lines reader could not parse: "; expected JSON Lines (one JSON object per
    line), this looks like CSV (header 'a,b,c')" — or "" when the line starts as JSON does (a mistake
    inside JSON, which the parser's own message says). `first`: the file's first line (a header)."""
    text = line.decode("utf-8", "replace") if isinstance(line, bytes) else line
    text = text.strip().lstrip("\ufeff")
    if not text or text[0] in '{["':
        return ""
    if text.startswith("<"):
        tag = text[1:].partition(">")[0]
        kind = "TREC SGML" if tag.upper() in _TREC_TAGS else "XML or SGML"
        shape = f"{kind} (<{tag[:20]}>)"
    elif "\t" in text or "," in text:
        kind = "TSV" if "\t" in text else "CSV"
        shape = f"{kind} ({'header' if first else 'line'} {text[:60]!r})"
    else:
        return ""
    return f"; expected JSON Lines (one JSON object per line), this looks like {shape}"
