"""A click group whose subcommands are imported when one is used, not when the program starts.

Importing every command module at start-up imported nats-py, pydantic's models, the DSL and the
credential store for `noetl-stream --help` too (~0.5 s of CPU); a command now costs only what it
imports itself. The list under `--help` comes from each command's summary kept beside its
module's name (tests/unit/test_cli_start_up.py checks it against the commands themselves).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import NamedTuple

import click


class LazyCommand(NamedTuple):
    """Where a subcommand lives, and the first sentence of its help, as `--help` lists it."""

    module: str  # a module of noetl_stream.cli
    attribute: str
    summary: str


class LazyGroup(click.Group):
    """Resolves `lazy` commands by importing their module on first use; commands added with
    `add_command` work as in any group.
    """

    def __init__(self, *args: object, lazy: Mapping[str, LazyCommand], **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.lazy = dict(lazy)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            entry = self.lazy[cmd_name]
            module = importlib.import_module(f"noetl_stream.cli.{entry.module}")
            command = getattr(module, entry.attribute)
            if not isinstance(command, click.Command):
                raise TypeError(f"noetl_stream.cli.{entry.module}.{entry.attribute} is no command")
            self.commands[cmd_name] = command
        return self.commands.get(cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The listing click writes, from the kept summaries, so `--help` imports no command module."""
        summaries: dict[str, Callable[[int], str]] = {
            name: (self.commands[name].get_short_help_str if name in self.commands
                   else self._summary(name))
            for name in self.list_commands(ctx)
            if name not in self.commands or not self.commands[name].hidden}
        if not summaries:
            return
        limit = formatter.width - 6 - max(len(name) for name in summaries)
        with formatter.section("Commands"):
            formatter.write_dl([(name, summary(limit)) for name, summary in summaries.items()])

    def _summary(self, name: str) -> Callable[[int], str]:
        """What `get_short_help_str` would say of the command, from its kept summary."""
        return click.Command(name, help=self.lazy[name].summary).get_short_help_str
