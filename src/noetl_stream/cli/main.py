"""`noetl-stream`: the command group. Each command lives in a module of its own (cli/*_cmd.py,
cli/credential.py) with no logic of its own; they call bus/, server/ and dsl/.

Exit codes (the conformance contract): 0 completed, 1 failed or cancelled, 2 rejected input or
usage error, 3 infrastructure error; 130 when Ctrl-C stops `run` waiting (the execution goes on).
"""

from __future__ import annotations

import click

from noetl_stream import __version__
from noetl_stream.cli.backup_cmd import backup, restore
from noetl_stream.cli.cancel_cmd import cancel
from noetl_stream.cli.catalog_cmd import register
from noetl_stream.cli.catalog_view_cmd import catalog
from noetl_stream.cli.common import setup_logging, verbosity
from noetl_stream.cli.credential import credential
from noetl_stream.cli.dlq_cmd import dlq
from noetl_stream.cli.executions_cmd import executions
from noetl_stream.cli.logs_cmd import logs
from noetl_stream.cli.replay_check_cmd import replay_check
from noetl_stream.cli.replay_cmd import replay
from noetl_stream.cli.restart_cmd import restart
from noetl_stream.cli.run_cmd import run
from noetl_stream.cli.service_cmds import init, nats_cmd, server, worker
from noetl_stream.cli.signal_cmd import send_signal
from noetl_stream.cli.status_cmd import status
from noetl_stream.cli.tools_cmd import tools
from noetl_stream.cli.trigger_cmd import trigger
from noetl_stream.cli.user_cmd import apikey, user
from noetl_stream.cli.validate_cmd import validate
from noetl_stream.cli.verify_cmd import verify
from noetl_stream.cli.watch_cmd import watch


def _v_flags(token: str) -> int:
    """How many -v a token means (`-v` 1, `-vv` 2, `--verbose` 1); 0 for any other token."""
    if token == "--verbose":
        return 1
    if len(token) > 1 and token[0] == "-" and set(token[1:]) == {"v"}:
        return len(token) - 1
    return 0


class _Cli(click.Group):
    """The command group, taking `-v` anywhere on the line (`noetl-stream run x.yaml -v` too):
    people add it at the end when a command misbehaves, and every subcommand logs the same way.
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        end = args.index("--") if "--" in args else len(args)
        ctx.meta["verbose"] = sum(_v_flags(a) for a in args[:end])
        kept = [a for a in args[:end] if not _v_flags(a)] + args[end:]
        return super().parse_args(ctx, kept)

    def invoke(self, ctx: click.Context) -> object:
        """A usage error (an unknown command or option, a bad value) is one line and exit 2, like
        every other error, not click's usage block.
        """
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            where = (exc.ctx or ctx).command_path.removeprefix(ctx.command_path).strip()
            hint = f" (`{(exc.ctx or ctx).command_path} --help`)" if exc.ctx is not None else ""
            click.echo(f"noetl-stream: {where + ': ' if where else ''}{exc.format_message()}{hint}",
                       err=True)
            ctx.exit(exc.exit_code)


@click.group(cls=_Cli, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="noetl-stream")
@click.option("-v", "--verbose", count=True,
              help="More logging on stderr (-v info, -vv debug); anywhere on the line.")
@click.pass_context
def main(ctx: click.Context, verbose: int) -> None:
    """Run NoETL playbooks on NATS JetStream.

    \b
    Quick start (no setup; starts an embedded nats-server):
      noetl-stream run playbooks/examples/hello.yaml
    \b
    As services:
      noetl-stream init   --nats-url nats://127.0.0.1:4222
      noetl-stream server --nats-url nats://127.0.0.1:4222
      noetl-stream worker --nats-url nats://127.0.0.1:4222 --pool default
      noetl-stream run playbook.yaml --nats-url nats://127.0.0.1:4222
    """
    setup_logging(verbosity())


@main.command()
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
def completion(shell: str) -> None:
    """Print the completion script for SHELL.

    \b
    bash: eval "$(noetl-stream completion bash)"     (in ~/.bashrc)
    zsh:  eval "$(noetl-stream completion zsh)"      (in ~/.zshrc)
    fish: noetl-stream completion fish > ~/.config/fish/completions/noetl-stream.fish
    """
    from click.shell_completion import get_completion_class

    completion_class = get_completion_class(shell)
    assert completion_class is not None  # the three choices are click's own
    click.echo(completion_class(main, {}, "noetl-stream", "_NOETL_STREAM_COMPLETE").source())


for command in (run, validate, server, worker, init, watch, nats_cmd, tools, credential, register, catalog,
                send_signal, user, apikey, cancel, status, dlq, executions, backup, restore, logs,
                trigger, verify, restart, replay, replay_check):
    main.add_command(command)
