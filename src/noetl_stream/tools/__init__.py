"""Tool kinds: one module per kind behind the `Tool` protocol of `base.py` (ARCHITECTURE §9)."""
