"""Relevance sets and where they come from (the synthetic generator, TREC collections, users' files):
what training learns from and evaluation measures on, so it sits below both."""
