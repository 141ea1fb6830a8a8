"""Authoring dialects that compile to the canonical IR (ARCHITECTURE §8): one engine, many forms."""
