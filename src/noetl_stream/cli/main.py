"""`noetl-stream`: the command group. Each command lives in a module of its own (cli/*_cmd.py,
cli/credential.py) with no logic of its own; they call bus/, server/ and dsl/.

Exit codes (the conformance contract): 0 completed, 1 failed or cancelled, 2 rejected input or
usage error, 3 infrastructure error; 130 when Ctrl-C stops `run` waiting (the execution goes on).
"""

from __future__ import annotations

import click

from noetl_stream import __version__
from noetl_stream.cli.common import setup_logging, verbosity
from noetl_stream.cli.lazy_group import LazyCommand, LazyGroup

# Each command's module is imported when the command runs (cli/lazy_group.py): name: (module of
# noetl_stream.cli, attribute, the first sentence of its help, which `--help` lists).
COMMANDS = {name: LazyCommand(*entry) for name, entry in {
    "apikey": ("user_cmd", "apikey",
        "API keys for programs calling the HTTP API (`Authorization: Bearer <key>`)."),
    "backup": ("backup_cmd", "backup",
        "Copy every stream, KV bucket and object store of noetl-stream into FOLDER."),
    "cancel": ("cancel_cmd", "cancel",
        "Cancel EXECUTION_ID: running steps stop, no new step starts, and it ends `cancelled`; "
        "children it waits for are cancelled too."),
    "catalog": ("catalog_view_cmd", "catalog",
        "Registered playbooks: `catalog list`, `catalog show PATH` (`register FILE` adds them)."),
    "credential": ("credential", "credential",
        "Store credentials (encrypted at rest) that tasks name with `auth:`."),
    "dlq": ("dlq_cmd", "dlq",
        "Dead letters: commands no worker finished after every delivery, or could not read."),
    "executions": ("executions_cmd", "executions",
        "Look at executions in bulk: `executions list`, `executions purge`."),
    "init": ("service_cmds", "init",
        "Provision streams, consumers and KV buckets (idempotent); report drift."),
    "logs": ("logs_cmd", "logs",
        "Show EXECUTION_ID's events, oldest first, with each task's captured stdout and stderr."),
    "nats": ("service_cmds", "nats_cmd",
        "Run the embedded nats-server in the foreground (store under NOETL_STREAM_HOME)."),
    "register": ("catalog_cmd", "register",
        "Validate PLAYBOOKS and register them in the catalog by their metadata.path."),
    "replay": ("replay_cmd", "replay",
        "Replay EXECUTION_ID as a new execution linked to it: the steps before STEP are not run and "
        "keep the original's results; STEP and everything downstream run."),
    "replay-check": ("replay_check_cmd", "replay_check",
        "Replay recorded executions against PLAYBOOK_FILE (a new version of their playbook) and name,"
        " per execution, where it would route differently: a step no longer reached, another arc "
        "taken, a guard that now errors."),
    "restart": ("restart_cmd", "restart",
        "Restart EXECUTION_ID where it stopped: completed steps keep their results and do not run "
        "again; the failed step (or STEP and everything downstream) runs again as a new attempt."),
    "restore": ("backup_cmd", "restore",
        "Recreate the streams, buckets and object stores backed up in FOLDER on a NATS without them."),
    "run": ("run_cmd", "run",
        "Run PLAYBOOK (a file, or a path registered in the catalog) and wait for its result, showing "
        "live progress on stderr."),
    "server": ("service_cmds", "server",
        "Run the server: consume execution requests and outcome events, route, publish commands."),
    "signal": ("signal_cmd", "send_signal",
        "Publish signal NAME to EXECUTION_ID; `eval_mode: on_event` steps see `signal.NAME`."),
    "status": ("status_cmd", "status",
        "Show EXECUTION_ID's status: running steps and since when, deadlines, loop iterations in "
        "flight, delayed tokens, joins and the branches they wait for; the result or error once done."),
    "tools": ("tools_cmd", "tools",
        "List tool kinds: built-in, or plugin with its entry point (group noetl_stream.tools)."),
    "trigger": ("trigger_cmd", "trigger",
        "Start executions on a schedule or on messages."),
    "user": ("user_cmd", "user",
        "Users of the HTTP API (`server --http`)."),
    "validate": ("validate_cmd", "validate",
        'Check PLAYBOOKS (and trigger documents) and print every problem as FILE:LINE: step "S" field'
        ' "F": message.'),
    "verify": ("verify_cmd", "verify",
        "Rebuild EXECUTION_ID's state from its recorded events through the router and compare it, "
        "field by field, with the state committed in KV (and the summary of its end event)."),
    "watch": ("watch_cmd", "watch",
        "Follow an execution's events live until it ends (like nats sub 'noetl.events.<id>.>')."),
    "worker": ("service_cmds", "worker",
        "Run a worker: pull commands of POOL, run their task pipelines, publish outcomes."),
}.items()}


def _v_flags(token: str) -> int:
    """How many -v a token means (`-v` 1, `-vv` 2, `--verbose` 1); 0 for any other token."""
    if token == "--verbose":
        return 1
    if len(token) > 1 and token[0] == "-" and set(token[1:]) == {"v"}:
        return len(token) - 1
    return 0


class _Cli(LazyGroup):
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


@click.group(cls=_Cli, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
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

