"""NoETL's forms through the CLI, as a user runs them: a `kind: Subscription` document is
validated and registered but not run; a playbook using NoETL's filters, `cmds:`,
`timeout_seconds:` and `script.source.code` validates and runs.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from cli import run_cli

pytestmark = pytest.mark.e2e

SUBSCRIPTION = textwrap.dedent("""\
    apiVersion: noetl.io/v1
    kind: Subscription
    metadata: {name: cli_orders, path: e2e/subscriptions/cli_orders}
    spec:
      source: webhook
      mode: push
      ingress:
        gateway_path: /ingress/orders
        verify: {type: bearer, secret: hook_bearer_token}
      dispatch: {playbook: e2e/handle_order, payload_from: message.json}
""")

FORMS = textwrap.dedent("""\
    apiVersion: noetl.io/v2
    kind: Playbook
    metadata: {name: cli_noetl_forms}
    workload:
      user: ada
      code: |
        result = {"who": who, "n": len(who)}
    workflow:
      - step: start
        tool:
          kind: shell
          timeout_seconds: 30
          cmds:
            - printf '%s' "{{ user | b64encode }}"
            - echo done
        next: [decode]
      - step: decode
        tool:
          kind: python
          script: {uri: inline, source: {type: inline, code: "{{ code }}"}}
          input:
            who: "{{ (start.result.commands | first).stdout | b64decode }}"
""")


async def test_a_subscription_validates_registers_and_is_not_run(tmp_path: Path) -> None:
    path = tmp_path / "orders.subscription.yaml"
    path.write_text(SUBSCRIPTION)

    validated = await run_cli("validate", str(path))
    registered = await run_cli("register", str(path))
    ran = await run_cli("run", str(path), "--json", "--quiet")

    assert validated.returncode == 0, validated.stderr
    assert validated.stdout == (f"{path}: ok (Subscription, webhook push to e2e/handle_order; "
                                "register stores it and the catalog lists it; `run` starts none "
                                "(`trigger apply` runs one whose form maps onto a trigger))\n")
    assert registered.returncode == 0, registered.stderr
    assert f"{path}: registered Subscription e2e/subscriptions/cli_orders (pb_" in registered.stdout
    assert ran.returncode == 2 and ran.stdout == ""
    assert f'{path}:2: field "kind": a Subscription is a catalog document' in ran.stderr
    assert "`run` starts no execution from it" in ran.stderr


async def test_an_invalid_subscription_is_rejected_naming_file_line_and_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.subscription.yaml"
    path.write_text(SUBSCRIPTION.replace("type: bearer", "type: none"))

    validated = await run_cli("validate", str(path))
    registered = await run_cli("register", str(path))

    assert validated.returncode == 2
    assert (f'{path}:9: field "spec.ingress.verify.type": subscription \'ingress.verify.type\' '
            "must be one of hmac_sha256, bearer, pubsub_oidc, not 'none'") in validated.stderr
    assert registered.returncode == 2 and "nothing was registered" in registered.stderr


async def test_noetl_forms_validate_and_run_through_the_cli(tmp_path: Path) -> None:
    path = tmp_path / "forms.yaml"
    path.write_text(FORMS)

    validated = await run_cli("validate", "--strict", str(path))
    ran = await run_cli("run", str(path), "--json", "--quiet")

    assert validated.returncode == 0, validated.stderr
    assert ran.returncode == 0, ran.stderr
    assert ran.summary["status"] == "completed", ran.summary.get("error")
    assert ran.summary["result"] == {"who": "ada", "n": 3}
