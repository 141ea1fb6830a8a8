"""The playbooks tests run, kept as YAML files in tests/<layer>/playbooks/ beside their tests.

A playbook that needs a value only a test has (a local server's URL, a size) names it `${name}`;
`read_playbook` fills each in and refuses a file left with a placeholder unfilled, so a renamed
placeholder fails the test that uses it instead of running a playbook with `${url}` in it.
"""

from __future__ import annotations

import re
from pathlib import Path

TESTS = Path(__file__).parent
_PLACEHOLDER = re.compile(r"\$\{(\w+)\}")


def playbook_path(layer: str, name: str) -> Path:
    """tests/<layer>/playbooks/<name>, e.g. ("integration", "cancel_sleepers.yaml")."""
    return TESTS / layer / "playbooks" / name


def fill(template: str, **values: object) -> str:
    """`template` with each `${key}` replaced by str(value); every key and placeholder must meet."""
    for key, value in values.items():
        placeholder = "${" + key + "}"
        if placeholder not in template:
            raise KeyError(f"the playbook has no {placeholder}")
        template = template.replace(placeholder, str(value))
    left = _PLACEHOLDER.findall(template)
    if left:
        raise KeyError(f"the playbook's placeholders {left} were given no value")
    return template


def read_playbook(layer: str, name: str, **values: object) -> str:
    """The text of tests/<layer>/playbooks/<name>, its `${key}` placeholders filled from `values`."""
    text = playbook_path(layer, name).read_text()
    return fill(text, **values) if values else text
