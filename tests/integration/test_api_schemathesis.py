"""Property-based run of schemathesis against the OpenAPI document, on a real port with a real
nats-server, server and worker behind the API: whatever it sends, no answer is a 5xx."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
import schemathesis
from api_client import admin_key, running_api
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from noetl_stream.api.routes import api_document
from noetl_stream.bus.connection import Bus

pytestmark = pytest.mark.integration

EXAMPLES_PER_OPERATION = 12


def _fuzz(base_url: str, token: str) -> list[str]:
    """Run every operation in both generation modes; the failures, one line each."""
    schema = schemathesis.openapi.from_dict(api_document())
    headers = {"Authorization": f"Bearer {token}"}
    failures: list[str] = []
    for result in schema.get_all_operations():
        operation = result.ok()
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            def check(case: Any) -> None:
                case.call_and_validate(base_url=base_url, headers=headers,
                                       checks=[not_a_server_error], timeout=30)

            run: Callable[[], None] = settings(
                max_examples=EXAMPLES_PER_OPERATION, deadline=None, database=None,
                phases=[Phase.explicit, Phase.generate],
                suppress_health_check=list(HealthCheck))(given(operation.as_strategy(mode))(check))
            try:
                run()
            except Unsatisfiable:
                # No input to make invalid (GET /health has no parameters): nothing to send.
                assert mode is GenerationMode.NEGATIVE, operation.label
            except Exception as exc:  # one failing operation must not hide the others
                failures.append(f"{operation.label} [{mode.value}]: "
                                f"{type(exc).__name__}: {str(exc)[:2000]}")
    return failures


async def test_api_answers_no_generated_request_with_a_server_error(bus: Bus, services: None) -> None:
    async with running_api(bus) as api:
        token = await admin_key(api)
        failures = await asyncio.to_thread(_fuzz, api.url, token)
    assert not failures, "\n".join(failures)
