"""`serve --help`, grouped by concern from the settings' declaration, each option's metavar
the kind of value it takes."""

from __future__ import annotations

import argparse
import subprocess
import sys

from coordinator_server.cli import build_parser
from coordinator_server.config import SETTING_GROUPS, CoordinatorConfig


def serve_parser() -> argparse.ArgumentParser:
    parser = build_parser(tools=False)
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices["serve"]


def test_every_setting_is_in_exactly_one_group_and_every_group_has_settings() -> None:
    groups = {
        group.title: {action.dest for action in group._group_actions}
        for group in serve_parser()._action_groups
        if group.title in SETTING_GROUPS
    }
    assert set(groups) == set(SETTING_GROUPS)
    assert all(groups.values()), groups
    placed = [dest for dests in groups.values() for dest in dests]
    assert sorted(placed) == sorted(CoordinatorConfig.model_fields)


def test_no_metavar_is_a_piece_of_the_settings_name() -> None:
    options = [a for a in serve_parser()._actions if a.dest in CoordinatorConfig.model_fields]
    assert len(options) == len(CoordinatorConfig.model_fields)
    for action in options:
        metavar = str(action.metavar)
        pieces = {piece.upper() for piece in action.dest.split("_")}
        # A unit (MS, BYTES) or a kind (HOST, PORT) that the name also says is right; a
        # word of the name that is neither (`--max-connections-per-ip IP`) is not.
        assert metavar in {"MS", "BYTES", "MINUTES", "HOST", "PORT"} or metavar not in pieces, (
            action.dest,
            metavar,
        )
    metavars = {action.dest: action.metavar for action in options}
    assert metavars["max_connections_per_ip"] == "N"
    assert metavars["bootstrap_servers"] == "HOST:PORT[,...]"
    assert metavars["offsets_commit_timeout_ms"] == "MS"
    assert metavars["data_dir"] == "PATH"
    assert metavars["transactions"] == "{auto,on,off}"
    assert metavars["offset_commit_check_partitions"] == "{on,off}"


def test_the_help_shows_the_groups_in_order() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "coordinator_server", "serve", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    headings = [line[:-1] for line in result.stdout.splitlines() if line[:-1] in SETTING_GROUPS]
    assert headings == list(SETTING_GROUPS)
