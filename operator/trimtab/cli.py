"""The ``trimtab`` command line: one click group, one sub-command per job.

Sub-commands that pull heavy dependencies (kopf, grpc, matplotlib) are imported lazily, so
``trimtab crd`` and ``trimtab version`` stay instant and work with only the core installed.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

import trimtab

__all__ = ["main"]

# name -> "module:attribute" of a click command, loaded on first use.
_LAZY_COMMANDS: dict[str, str] = {
    "demo": "trimtab.demo.command:demo",
    "emulate": "trimtab.emulator.command:emulate_command",
    "envoy-bootstrap": "trimtab.envoy.command:envoy_bootstrap",
    "run": "trimtab.controller.command:run",
    "sim": "trimtab.sim.command:sim",
}


class _LazyGroup(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *_LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in _LAZY_COMMANDS:
            module_name, attribute = _LAZY_COMMANDS[cmd_name].split(":")
            command: Any = getattr(importlib.import_module(module_name), attribute)
            assert isinstance(command, click.Command)
            return command
        return super().get_command(ctx, cmd_name)


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
