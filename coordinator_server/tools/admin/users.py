"""`coordinator-server users`: the coordinator's SCRAM users, as Kafka's kafka-configs.sh
manages them (`--alter --add-config 'SCRAM-SHA-256=[...]' --entity-type users`), through
DescribeUserScramCredentials and AlterUserScramCredentials.

    coordinator-server users add NAME --mechanism SCRAM-SHA-256|SCRAM-SHA-512
        [--iterations N] [--password-file F]
    coordinator-server users delete NAME --mechanism M
    coordinator-server users list [NAME ...]

The password is read from `--password-file` (its first line) or asked twice on the terminal;
there is no option that takes it, so it never lands in a shell's history or a process list.
The tool derives the credential itself, as Kafka's admin client does: a random salt (Kafka's
form, the base-36 digits of 130 random bits) and Hi(password, salt, iterations) of RFC 5802
(4096 iterations by default, kafka-configs' default), so the password never goes on the wire.

Exit status: 0 ok, 1 when the server refuses (its error printed), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import getpass
import json
import sys
from pathlib import Path
from typing import Final, TextIO

from coordinator_client import ClientError, CoordinatorClient
from coordinator_client.rpc.sasl import (
    SCRAM_DEFAULT_ITERATIONS,
    SCRAM_HASHES,
    scram_mechanism_number,
    scram_upsertion,
)
from coordinator_protocol.errors import ApiError, ErrorCode, error_for_code
from coordinator_protocol.security import (
    SCRAM_MECHANISMS,
    AlterUserScramCredentialsRequest,
    AlterUserScramCredentialsRequestDeletion,
    AlterUserScramCredentialsResponse,
    DescribeUserScramCredentialsRequest,
    DescribeUserScramCredentialsRequestUser,
)
from coordinator_server.tools.admin.common import (
    CONNECT_CHECK_S,
    AdminError,
    UsageError,
    check_reachable,
    configure_tool_logging,
    coordinator_options,
    new_coordinator_client,
)

__all__ = ["add_parser", "main"]

_PROG: Final = "coordinator-server users"
_CLIENT_ID: Final = "coordinator-server-users"


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `users` and its sub-commands on the `coordinator-server` parser."""
    common = coordinator_options()
    users = commands.add_parser(
        "users",
        help="add, delete and list SCRAM users (Kafka's kafka-configs --entity-type users)",
        description="Manage the SCRAM credentials the coordinator authenticates users with. "
        "Passwords are read from a file or the terminal, never from an option. Exit status: "
        "0 ok, 1 refused, 2 usage.",
    )
    actions = users.add_subparsers(dest="users_command", required=True, metavar="COMMAND")
    mechanisms = list(SCRAM_HASHES)

    # No abbreviations: "--password SECRET" must not pass for --password-file.
    add = actions.add_parser(
        "add",
        parents=[common],
        allow_abbrev=False,
        help="give a user a SCRAM credential (or a new password)",
    )
    add.add_argument("name", metavar="NAME", help="the user, as its principal names it")
    add.add_argument("--mechanism", required=True, type=str.upper, choices=mechanisms)
    add.add_argument(
        "--iterations",
        type=int,
        default=SCRAM_DEFAULT_ITERATIONS,
        help=f"PBKDF2 iterations [default {SCRAM_DEFAULT_ITERATIONS}, Kafka's 4096 to 16384]",
    )
    add.add_argument(
        "--password-file",
        metavar="FILE",
        help="the password, the file's first line (default: asked twice on the terminal)",
    )

    delete = actions.add_parser(
        "delete", parents=[common], allow_abbrev=False, help="remove a user's credential"
    )
    delete.add_argument("name", metavar="NAME")
    delete.add_argument("--mechanism", required=True, type=str.upper, choices=mechanisms)

    listing = actions.add_parser(
        "list",
        parents=[common],
        allow_abbrev=False,
        help="users' mechanisms and iterations (every user by default)",
    )
    listing.add_argument("names", nargs="*", metavar="NAME")


def main(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run a parsed `users` command; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    configure_tool_logging(err)
    try:
        password = _password(args) if args.users_command == "add" else None
        client = new_coordinator_client(args, _CLIENT_ID)
        asyncio.run(_run(args, client, password, out))
    except UsageError as error:
        print(f"{_PROG}: error: {error}", file=err)
        return 2
    except AdminError as error:
        print(f"{_PROG}: error: {error}", file=err)
        return 1
    except (ApiError, ClientError, OSError, TimeoutError, ValueError) as error:
        text = str(error)
        if not isinstance(error, ApiError):
            text = f"{type(error).__name__}: {text}" if text else type(error).__name__
        print(f"{_PROG}: error: {text}", file=err)
        return 1
    return 0


def _password(args: argparse.Namespace) -> str:
    """The new password: the file's first line, or asked twice on the terminal."""
    if args.password_file is not None:
        # The file's name is not repeated: a password typed where its name belongs would be.
        try:
            lines = Path(args.password_file).read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as error:
            reason = getattr(error, "strerror", None) or type(error).__name__
            raise AdminError(f"cannot read the --password-file: {reason}") from None
        if not lines or not lines[0]:
            raise AdminError("the --password-file is empty")
        return lines[0]
    if not sys.stdin.isatty():
        raise UsageError(
            "no terminal to ask the password on: give --password-file (there is no option "
            "that takes the password itself)"
        )
    first = getpass.getpass(f"Password for {args.name}: ")
    if not first:
        raise AdminError("the password is empty")
    if getpass.getpass("Again: ") != first:
        raise AdminError("the two passwords differ")
    return first


async def _run(
    args: argparse.Namespace,
    client: CoordinatorClient,
    password: str | None,
    out: TextIO,
) -> None:
    async with client:
        await check_reachable(client, min(CONNECT_CHECK_S, args.timeout_ms / 1000))
        if args.users_command == "list":
            await _list(client, args.names, args.json, out)
            return
        if args.users_command == "add":
            assert password is not None
            request = AlterUserScramCredentialsRequest(
                upsertions=[
                    scram_upsertion(args.name, args.mechanism, password, iterations=args.iterations)
                ]
            )
        else:
            request = AlterUserScramCredentialsRequest(
                deletions=[
                    AlterUserScramCredentialsRequestDeletion(
                        name=args.name, mechanism=scram_mechanism_number(args.mechanism)
                    )
                ]
            )
        _raise_refused(await client.alter_user_scram_credentials(request))
        if args.json:
            json.dump({"user": args.name, "mechanism": args.mechanism}, out)
            out.write("\n")
        else:
            # kafka-configs' words.
            print(f"Completed updating config for user {args.name}.", file=out)


def _raise_refused(response: AlterUserScramCredentialsResponse) -> None:
    for result in response.results:
        if result.error_code != ErrorCode.NONE:
            message = result.error_message or ErrorCode(result.error_code).description
            raise error_for_code(result.error_code, f"user {result.user!r}: {message}")


async def _list(client: CoordinatorClient, names: list[str], as_json: bool, out: TextIO) -> None:
    request = DescribeUserScramCredentialsRequest(
        users=[DescribeUserScramCredentialsRequestUser(name=name) for name in names] or None
    )
    response = await client.describe_user_scram_credentials(request)
    if response.error_code != ErrorCode.NONE:
        raise error_for_code(response.error_code, response.error_message)
    listed = []
    refused: list[str] = []
    for result in sorted(response.results, key=lambda result: result.user):
        if result.error_code != ErrorCode.NONE:
            message = result.error_message or ErrorCode(result.error_code).description
            refused.append(f"user {result.user!r}: {ErrorCode(result.error_code).name}: {message}")
            continue
        credentials = [
            (SCRAM_MECHANISMS.get(info.mechanism, f"UNKNOWN({info.mechanism})"), info.iterations)
            for info in result.credential_infos
        ]
        listed.append((result.user, credentials))
    if as_json:
        json.dump(
            [
                {
                    "user": user,
                    "credentials": [
                        {"mechanism": mechanism, "iterations": iterations}
                        for mechanism, iterations in credentials
                    ],
                }
                for user, credentials in listed
            ],
            out,
            indent=2,
        )
        out.write("\n")
    else:
        for user, credentials in listed:
            # kafka-configs --describe --entity-type users' line.
            configs = ", ".join(f"{m}=iterations={i}" for m, i in credentials)
            print(f"SCRAM credential configs for user-principal '{user}' are {configs}", file=out)
    if refused:
        raise AdminError("; ".join(refused))
