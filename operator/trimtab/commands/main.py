"""The ``trimtab`` command line: one click group, one sub-command per job.

Sub-commands that pull heavy dependencies (kopf, grpc) are imported lazily, so ``trimtab crd``
and ``trimtab version`` stay instant. The lab (``trimtab-lab``: sim, emulate, demo) adds its
commands through the ``trimtab.commands`` entry point group; the operator never imports it.
"""

from __future__ import annotations

import importlib
from importlib import metadata
from typing import Any

import click

import trimtab

__all__ = ["main"]

# name -> "module:attribute" of a click command, loaded on first use.
_LAZY_COMMANDS: dict[str, str] = {
    "envoy-bootstrap": "trimtab.commands.envoy_bootstrap:envoy_bootstrap",
    "run": "trimtab.commands.run:run",
}
PLUGIN_GROUP = "trimtab.commands"


def _commands() -> dict[str, str]:
    found = {ep.name: ep.value for ep in metadata.entry_points(group=PLUGIN_GROUP)}
    return {**found, **_LAZY_COMMANDS}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_commands()])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        commands = _commands()
        if cmd_name not in commands:
            return super().get_command(ctx, cmd_name)
        module_name, attribute = commands[cmd_name].split(":")
        try:
            command: Any = getattr(importlib.import_module(module_name), attribute)
        except ImportError as exc:
            if cmd_name in _LAZY_COMMANDS:
                raise
            # A lab installed half-way (its entry point visible, its package or dependencies
            # not) must not take the operator's own commands down with it.
            return _unavailable(cmd_name, reason=str(exc))
        assert isinstance(command, click.Command)
        return command


def _unavailable(name: str, *, reason: str) -> click.Command:
    def fail() -> None:
        raise click.ClickException(f"{name} needs the lab (pip install ./lab): {reason}")

    return click.Command(name, callback=fail, help=f"(unavailable: {reason})")


@click.group(cls=_LazyGroup)
def main() -> None:
    """trimtab: balance LLM serving replicas by their real load."""


@main.command()
def version() -> None:
    """Print trimtab's version."""
    click.echo(trimtab.__version__)


@main.command()
def crd() -> None:
    """Print the InferencePool CustomResourceDefinition generated from the API models."""
    from trimtab.api.crd import render_crd

    click.echo(render_crd(), nl=False)
