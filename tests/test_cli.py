"""The command line: the group lists every command and the basic ones work."""

from __future__ import annotations

from click.testing import CliRunner

import trimtab
from trimtab.commands.main import main


def test_version() -> None:
    result = CliRunner().invoke(main, ["version"])
    assert result.exit_code == 0
    assert result.output.strip() == trimtab.__version__


def test_help_lists_commands() -> None:
    result = CliRunner().invoke(main, ["--help"])
    assert result.exit_code == 0
    assert "crd" in result.output and "version" in result.output
