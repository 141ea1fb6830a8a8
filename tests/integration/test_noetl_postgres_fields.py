"""NoETL's ways of naming a postgres task's connection, run against a real PostgreSQL."""

from __future__ import annotations

from urllib.parse import unquote, urlsplit

import pytest
from plain_client import PlainClient

from playbook_files import read_playbook

pytestmark = pytest.mark.integration


async def test_flat_connection_fields_and_connection_string_reach_the_database(
        pg_dsn: str, services: None, client: PlainClient) -> None:
    parts = urlsplit(pg_dsn)
    pg = {"host": parts.hostname, "port": parts.port, "user": unquote(parts.username or ""),
          "password": unquote(parts.password or ""), "database": parts.path.lstrip("/"),
          "dsn": pg_dsn}

    feed = await client.run("pg-fields-1", read_playbook("integration", "noetl_postgres_fields.yaml"),
                            payload={"pg": pg})

    final = feed.final
    assert final["event_type"] == "execution.completed", final.get("error")
    assert final["steps"]["dsn_field"]["result"]["rows"] == [
        {"via": "db_host/db_port/db_user/db_password/db_name"},
        {"via": "host/port/user/password/database"}]
