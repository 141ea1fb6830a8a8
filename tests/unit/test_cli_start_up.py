"""What a command imports before it does anything: `--help` none of the runtime, and no command
aiohttp unless it reads it (deferred_imports.py). Measured by the modules a fresh interpreter
holds, not by timing, so a load on the machine cannot make it pass or fail.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from noetl_stream.cli.lazy_group import LazyGroup
from noetl_stream.cli.main import COMMANDS, main

# Packages that cost a command start-up and that `--help` has no use for.
RUNTIME_PACKAGES = {"nats", "pydantic", "pydantic_core", "jinja2", "ruamel", "yaml", "aiohttp", "duckdb",
                    "asyncpg", "psycopg", "prometheus_client", "opentelemetry", "cryptography", "uvloop"}


MARK = "--- modules:"


def _modules_after(code: str) -> set[str]:
    """The modules a fresh interpreter holds after `code`; a DeferredModule counts as absent."""
    probe = (f"{code}\nimport sys\nfrom types import ModuleType\n"
             f"print({MARK!r}, *(n for n, m in list(sys.modules.items())\n"
             "                 if type(m) is ModuleType or not isinstance(m, ModuleType)))")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=120, check=True)
    return set(done.stdout.rpartition(MARK)[2].split())  # after what the command printed


def _top_level(modules: set[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


def test_help_imports_no_command_module_and_none_of_the_runtime() -> None:
    modules = _modules_after(
        "import sys\nfrom noetl_stream.cli.main import main\n"
        "try:\n    main(['--help'], prog_name='noetl-stream')\nexcept SystemExit:\n    pass")

    assert _top_level(modules) & RUNTIME_PACKAGES == set()
    commands = {f"noetl_stream.cli.{entry.module}" for entry in COMMANDS.values()}
    assert modules & commands == set()
    assert not any(m.startswith(("noetl_stream.bus", "noetl_stream.server", "noetl_stream.dsl",
                                 "noetl_stream.api")) for m in modules)


@pytest.mark.parametrize("command", ["run", "server", "worker", "validate"])
def test_a_commands_help_imports_none_of_the_runtime(command: str) -> None:
    modules = _modules_after(
        "from noetl_stream.cli.main import main\n"
        f"try:\n    main([{command!r}, '--help'], prog_name='noetl-stream')\n"
        "except SystemExit:\n    pass")

    assert _top_level(modules) & {"nats", "aiohttp", "cryptography", "prometheus_client",
                                  "opentelemetry", "duckdb", "asyncpg"} == set()
    assert not any(m.startswith(("noetl_stream.bus", "noetl_stream.server", "noetl_stream.worker",
                                 "noetl_stream.api")) for m in modules)


def test_a_command_imports_only_its_own_module() -> None:
    modules = _modules_after(
        "from noetl_stream.cli.main import main\n"
        "try:\n    main(['tools'], prog_name='noetl-stream')\nexcept SystemExit:\n    pass")

    assert "noetl_stream.cli.tools_cmd" in modules
    assert {"noetl_stream.cli.run_cmd", "noetl_stream.cli.credential",
            "noetl_stream.cli.backup_cmd"} & modules == set()


def test_validate_of_a_playbook_imports_no_nats_client_and_no_message_models() -> None:
    playbook = Path(__file__).resolve().parents[2] / "playbooks" / "examples" / "hello.yaml"
    modules = _modules_after(
        "from noetl_stream.cli.main import main\n"
        f"try:\n    main(['validate', {str(playbook)!r}], prog_name='noetl-stream')\n"
        "except SystemExit as exc:\n    assert exc.code == 0, exc.code")

    assert "noetl_stream.dsl.parser" in modules  # it did validate
    assert _top_level(modules) & {"nats", "aiohttp", "cryptography", "prometheus_client"} == set()
    assert {"noetl_stream.messages", "noetl_stream.cli.trigger_cmd"} & modules == set()


def test_runs_start_imports_no_http_client_web_app_or_database_driver() -> None:
    """What `run` imports to start the embedded stack, a server and a worker: aiohttp (nats-py's
    WebSocket transport imports it) stays deferred, the HTTP API and drivers unimported."""
    modules = _modules_after("import noetl_stream.cli.run_cmd, noetl_stream.cli.running, "
                             "noetl_stream.services, noetl_stream.worker.worker, "
                             "noetl_stream.server.server, nats.aio.transport")

    assert "nats" in _top_level(modules)  # the check itself sees what it looks for
    assert _top_level(modules) & {"aiohttp", "duckdb", "asyncpg", "psycopg", "yarl"} == set()
    assert not any(m.startswith(("noetl_stream.api", "noetl_stream.http_site")) for m in modules)


def test_a_deferred_package_is_imported_at_its_first_use() -> None:
    modules = _modules_after(
        "import noetl_stream, sys\nimport nats.aio.transport as transport\n"
        "from noetl_stream.deferred_imports import DeferredModule\n"
        "assert isinstance(sys.modules['aiohttp'], DeferredModule)\n"
        "from aiohttp import web\n"
        "assert web.Application.__module__ == 'aiohttp.web_app'\n"
        "assert transport.aiohttp.ClientSession.__module__ == 'aiohttp.client'\n"
        "assert not isinstance(sys.modules['aiohttp'], DeferredModule)\n"
        "import importlib.util\nassert importlib.util.find_spec('aiohttp').name == 'aiohttp'")

    assert {"aiohttp", "aiohttp.web", "aiohttp.client"} <= modules


def _help(group: click.Group) -> str:
    return group.get_help(click.Context(group, info_name="noetl-stream"))


def test_help_lists_every_command_as_the_commands_themselves_would() -> None:
    """The summaries kept in cli/main.py are the first sentence of each command's help, and the
    listing reads as click's own listing of the imported commands."""
    settings = {"help": main.help, "params": main.params, "context_settings": main.context_settings}
    lazy = LazyGroup("noetl-stream", lazy=COMMANDS, **settings)
    eager = click.Group("noetl-stream", **settings)
    for name in main.list_commands(click.Context(main)):
        command = main.get_command(click.Context(main), name)
        assert command is not None, name
        eager.add_command(command, name)
        if name in COMMANDS:
            assert command.get_short_help_str(10_000) == COMMANDS[name].summary, name
        else:
            lazy.add_command(command, name)  # `completion`, defined in cli/main.py itself

    assert set(eager.commands) == set(COMMANDS) | {"completion"}
    assert _help(lazy) == _help(eager)
