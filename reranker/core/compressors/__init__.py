"""The compressors: what the stored positions of an item are (`base.py` says what each one owns).

gist    learned gist tokens after the item (gist.py)
select  the item columns an observation window attends to most, per layer and head (select.py)
prefix  the item's first t + k tokens, plain prefix caching at the budget (prefix.py)
"""

from __future__ import annotations

from reranker.core.compressors.base import Compressor
from reranker.core.compressors.gist import GistCompressor
from reranker.core.compressors.prefix import PrefixCompressor
from reranker.core.compressors.select import SelectCompressor
from reranker.core.config import known_compressor

COMPRESSORS: dict[str, Compressor] = {
    c.name: c for c in (GistCompressor(), SelectCompressor(), PrefixCompressor())
}


def compressor_for(name: str) -> Compressor:
    """The compressor called `name`; a `ValueError` naming the known ones otherwise."""
    return COMPRESSORS[known_compressor(name)]


__all__ = [
    "COMPRESSORS",
    "Compressor",
    "GistCompressor",
    "PrefixCompressor",
    "SelectCompressor",
    "compressor_for",
]
