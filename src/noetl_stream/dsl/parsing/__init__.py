"""The playbook parser's parts, one a module by what it parses (dsl/parser.py joins them)."""
