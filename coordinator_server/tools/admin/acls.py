"""`coordinator-server acls`: Kafka's kafka-acls.sh (its `AclCommand`) for the coordinator's
ACLs, with its options and its output.

    coordinator-server acls --bootstrap-server H:P [--command-config F] \\
        (--add | --remove | --list) \\
        [--allow-principal P ...] [--deny-principal P ...] [--allow-host H ...] \\
        [--deny-host H ...] [--operation OP ...] \\
        [--group G ...] [--topic T ...] [--transactional-id ID ...] [--cluster] \\
        [--resource-pattern-type literal|prefixed|match|any] [--principal P ...] [--force]

As kafka-acls.sh: an ACL is made for each principal, host (`*` when none is given) and
operation (`All` when none is given) on each resource named; `--add` needs a LITERAL or
PREFIXED pattern and a principal, and skips (and says so) an ACL that exists; `--remove`
removes those ACLs, or with no principal every ACL of the resources, after a confirmation
(`--force` asks none; without a terminal to ask on, nothing is removed); `--list` prints the
ACLs of the resources named (every ACL without one), by resource, or those of `--principal`.
`--cluster` is the one Cluster resource, `kafka-cluster`, matched by name (it has no
PREFIXED pattern).

Exit status: 0 ok, 1 when the server refuses (its error printed), 2 for a usage error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, TextIO, TypeVar

from coordinator_client import ClientError, CoordinatorClient
from coordinator_protocol.errors import ApiError, ErrorCode, error_for_code
from coordinator_protocol.security import (
    CreateAclsRequest,
    CreateAclsRequestCreation,
    DeleteAclsRequest,
    DeleteAclsRequestFilter,
    DescribeAclsRequest,
)
from coordinator_server.authorizer.acls import (
    CLUSTER_NAME,
    WILDCARD,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
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

E = TypeVar("E", ResourceType, PatternType, AclOperation, AclPermissionType)

_PROG: Final = "coordinator-server acls"
_CLIENT_ID: Final = "coordinator-server-acls"
# Kafka's AclEntry.supportedOperations, per resource type (ALL goes with every type).
_SUPPORTED: Final = {
    ResourceType.TOPIC: (
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.CREATE,
        AclOperation.DESCRIBE,
        AclOperation.DELETE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
    ),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE),
    ResourceType.CLUSTER: (
        AclOperation.CREATE,
        AclOperation.CLUSTER_ACTION,
        AclOperation.DESCRIBE_CONFIGS,
        AclOperation.ALTER_CONFIGS,
        AclOperation.IDEMPOTENT_WRITE,
        AclOperation.ALTER,
        AclOperation.DESCRIBE,
    ),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
}
# The names --operation takes (Kafka's, as kafka-acls.sh lists them).
_OPERATION_NAMES: Final = {
    "Read": AclOperation.READ,
    "Write": AclOperation.WRITE,
    "Create": AclOperation.CREATE,
    "Delete": AclOperation.DELETE,
    "Alter": AclOperation.ALTER,
    "Describe": AclOperation.DESCRIBE,
    "ClusterAction": AclOperation.CLUSTER_ACTION,
    "DescribeConfigs": AclOperation.DESCRIBE_CONFIGS,
    "AlterConfigs": AclOperation.ALTER_CONFIGS,
    "IdempotentWrite": AclOperation.IDEMPOTENT_WRITE,
    "All": AclOperation.ALL,
}
_PATTERN_TYPES: Final = {
    "literal": PatternType.LITERAL,
    "prefixed": PatternType.PREFIXED,
    "match": PatternType.MATCH,
    "any": PatternType.ANY,
}


@dataclass(frozen=True, order=True)
class Resource:
    """A resource pattern, or a filter of them (Kafka's ResourcePattern(Filter)); prints as
    Kafka prints both."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType

    def __str__(self) -> str:
        return (
            f"ResourcePattern(resourceType={self.resource_type.name}, name={self.name}, "
            f"patternType={self.pattern_type.name})"
        )


@dataclass(frozen=True, order=True)
class Entry:
    """Who may or may not do what, from where (Kafka's AccessControlEntry)."""

    principal: str
    host: str
    operation: AclOperation
    permission: AclPermissionType

    def __str__(self) -> str:
        return (
            f"(principal={self.principal}, host={self.host}, operation={self.operation.name}, "
            f"permissionType={self.permission.name})"
        )


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Register `acls` on the `coordinator-server` parser."""
    parser = commands.add_parser(
        "acls",
        parents=[coordinator_options()],
        allow_abbrev=False,
        help="add, remove and list ACLs (Kafka's kafka-acls)",
        description="Add, remove and list the coordinator's ACLs, with kafka-acls.sh's options "
        "and output. Exit status: 0 ok, 1 refused, 2 usage.",
    )
    action = parser.add_mutually_exclusive_group(required=True)
    action.add_argument("--add", action="store_true", help="add ACLs")
    action.add_argument("--remove", action="store_true", help="remove ACLs")
    action.add_argument("--list", action="store_true", help="list ACLs")
    parser.add_argument(
        "--allow-principal",
        metavar="TYPE:NAME",
        help="a principal allowed, e.g. User:alice, User:* for everyone (repeatable)",
        action="append",
        default=[],
    )
    parser.add_argument(
        "--deny-principal",
        metavar="TYPE:NAME",
        help="a principal denied; DENY wins over ALLOW (repeatable)",
        action="append",
        default=[],
    )
    parser.add_argument(
        "--allow-host",
        metavar="HOST",
        help="a host the allowed principals may come from [default *: any] (repeatable)",
        action="append",
        default=[],
    )
    parser.add_argument(
        "--deny-host",
        metavar="HOST",
        help="a host the denied principals are denied from [default *: any] (repeatable)",
        action="append",
        default=[],
    )
    parser.add_argument(
        "--operation",
        metavar="OP",
        help=f"an operation allowed or denied [default All]: {', '.join(_OPERATION_NAMES)} "
        "(repeatable)",
        action="append",
        default=[],
    )
    parser.add_argument(
        "--group",
        metavar="GROUP",
        help="a consumer group; * for all (repeatable)",
        action="append",
        default=[],
    )
    parser.add_argument(
        "--topic",
        metavar="TOPIC",
        help="a topic; * for all (repeatable)",
        action="append",
        default=[],
    )
    parser.add_argument(
        "--transactional-id",
        metavar="ID",
        help="a transactional id; * for all (repeatable)",
        action="append",
        default=[],
    )
    parser.add_argument("--cluster", action="store_true", help="the cluster resource")
    parser.add_argument(
        "--resource-pattern-type",
        default="literal",
        type=str.lower,
        choices=list(_PATTERN_TYPES),
        help="literal or prefixed names (--add); to list or remove, also any (the name "
        "exactly, any pattern type) or match (every ACL that applies to the name) "
        "[default literal]",
    )
    parser.add_argument(
        "--principal",
        metavar="TYPE:NAME",
        help="with --list: only this principal's ACLs (repeatable)",
        action="append",
        default=[],
    )
    parser.add_argument("--force", action="store_true", help="remove without asking")


def main(args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run a parsed `acls` command; returns the exit status."""
    out = out or sys.stdout
    err = err or sys.stderr
    configure_tool_logging(err)
    try:
        plan = _plan(args)
        client = new_coordinator_client(args, _CLIENT_ID)
        asyncio.run(_run(args, plan, client, out))
    except UsageError as error:
        print(f"{_PROG}: error: {error}", file=err)
        return 2
    except AdminError as error:
        print(f"{_PROG}: error: {error}", file=err)
        return 1
    except (ApiError, ClientError, OSError, TimeoutError, ValueError) as error:
        print(f"{_PROG}: error: {_describe(error)}", file=err)
        return 1
    return 0


def _describe(error: BaseException) -> str:
    if isinstance(error, ApiError):
        return str(error)
    text = str(error)
    return f"{type(error).__name__}: {text}" if text else type(error).__name__


# What the options ask for


@dataclass(frozen=True)
class _Plan:
    resources: list[Resource]
    entries: list[Entry]
    principals: list[str]


def _plan(args: argparse.Namespace) -> _Plan:
    """The resources and entries the options name, checked as kafka-acls.sh checks them."""
    pattern_type = _PATTERN_TYPES[args.resource_pattern_type]
    naming = (args.allow_principal, args.deny_principal, args.allow_host, args.deny_host)
    if args.list and any(naming):
        raise UsageError(
            "--list cannot be used with --allow-principal, --deny-principal, --allow-host or "
            "--deny-host (use --principal to list a principal's ACLs)"
        )
    if args.principal and not args.list:
        raise UsageError("The --principal option is only available if --list is set")
    if args.add and pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise UsageError(
            f"A '--resource-pattern-type' value of '{pattern_type.name}' is not valid when "
            "adding acls."
        )
    resources = _resources(args, pattern_type)
    if not resources and not args.list:
        raise UsageError(
            "You must provide at least one resource: --topic <topic> or --cluster or "
            "--group <group> or --transactional-id <id>"
        )
    entries = _entries(args)
    if args.add and not entries:
        raise UsageError(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        )
    for resource in resources:
        supported = (*_SUPPORTED[resource.resource_type], AclOperation.ALL)
        if any(entry.operation not in supported for entry in entries):
            raise UsageError(
                f"ResourceType {resource.resource_type.name} only supports operations "
                f"[{', '.join(op.name for op in supported)}]"
            )
    principals = [_principal(text) for text in args.principal]
    return _Plan(resources, entries, list(dict.fromkeys(principals)))


def _resources(args: argparse.Namespace, pattern_type: PatternType) -> list[Resource]:
    resources = [Resource(ResourceType.TOPIC, topic.strip(), pattern_type) for topic in args.topic]
    if args.cluster:
        if pattern_type is PatternType.PREFIXED:
            raise UsageError("--cluster names the one cluster: it has no prefixed pattern")
        resources.append(Resource(ResourceType.CLUSTER, CLUSTER_NAME, pattern_type))
    resources += [Resource(ResourceType.GROUP, group.strip(), pattern_type) for group in args.group]
    resources += [
        Resource(ResourceType.TRANSACTIONAL_ID, transactional_id, pattern_type)
        for transactional_id in args.transactional_id
    ]
    return list(dict.fromkeys(resources))


def _entries(args: argparse.Namespace) -> list[Entry]:
    operations = [_operation(name) for name in args.operation] or [AclOperation.ALL]
    entries: list[Entry] = []
    for principals, hosts, permission in (
        (args.allow_principal, args.allow_host, AclPermissionType.ALLOW),
        (args.deny_principal, args.deny_host, AclPermissionType.DENY),
    ):
        # Kafka's getHosts: any host unless hosts are named, once a principal is.
        named_hosts = [host.strip() for host in hosts] or [WILDCARD]
        entries.extend(
            Entry(_principal(principal), host, operation, permission)
            for principal in principals
            for operation in operations
            for host in named_hosts
        )
    return sorted(set(entries))


def _operation(name: str) -> AclOperation:
    wanted = name.strip().replace("_", "").lower()
    for known, operation in _OPERATION_NAMES.items():
        if known.lower() == wanted:
            return operation
    raise UsageError(f"unknown operation {name!r}: one of {', '.join(_OPERATION_NAMES)}")


def _principal(text: str) -> str:
    principal_type, sep, name = text.strip().partition(":")
    if not sep or not principal_type or not name:
        raise UsageError(
            f"expected a principal as principalType:principalName (User:alice), got {text!r}"
        )
    return f"{principal_type}:{name}"


# Running it


async def _run(
    args: argparse.Namespace, plan: _Plan, client: CoordinatorClient, out: TextIO
) -> None:
    async with client:
        await check_reachable(client, min(CONNECT_CHECK_S, args.timeout_ms / 1000))
        if args.add:
            await _add(client, plan, args.json, out)
        elif args.remove:
            await _remove(client, plan, args, out)
        else:
            await _list(client, plan, args.json, out)


async def _describe_acls(
    client: CoordinatorClient, resource: Resource | None
) -> dict[Resource, set[Entry]]:
    """The ACLs a resource filter selects (every ACL for None), by resource."""
    if resource is None:
        request = DescribeAclsRequest(
            resource_type_filter=ResourceType.ANY,
            pattern_type_filter=PatternType.ANY,
            operation=AclOperation.ANY,
            permission_type=AclPermissionType.ANY,
        )
    else:
        request = DescribeAclsRequest(
            resource_type_filter=resource.resource_type,
            resource_name_filter=resource.name,
            pattern_type_filter=resource.pattern_type,
            operation=AclOperation.ANY,
            permission_type=AclPermissionType.ANY,
        )
    response = await client.describe_acls(request)
    found: dict[Resource, set[Entry]] = {}
    for described in response.resources:
        pattern = Resource(
            _enum(ResourceType, described.resource_type),
            described.resource_name,
            _enum(PatternType, described.pattern_type),
        )
        entries = found.setdefault(pattern, set())
        for acl in described.acls:
            entries.add(
                Entry(
                    acl.principal,
                    acl.host,
                    _enum(AclOperation, acl.operation),
                    _enum(AclPermissionType, acl.permission_type),
                )
            )
    return found


async def _add(client: CoordinatorClient, plan: _Plan, as_json: bool, out: TextIO) -> None:
    created: list[tuple[Resource, Entry]] = []
    existing: list[tuple[Resource, Entry]] = []
    for resource in plan.resources:
        present = (await _describe_acls(client, resource)).get(resource, set())
        new = [entry for entry in plan.entries if entry not in present]
        for entry in plan.entries:
            if entry in present:
                existing.append((resource, entry))
                if not as_json:
                    print(f"Acl (pattern={resource}, entry={entry}) already exists.", file=out)
        if not new:
            continue
        if not as_json:
            listed = "\n".join(f"\t{entry}" for entry in new)
            print(f"Adding ACLs for resource `{resource}`: \n {listed}\n", file=out)
        response = await client.create_acls(
            CreateAclsRequest(
                creations=[
                    CreateAclsRequestCreation(
                        resource_type=resource.resource_type,
                        resource_name=resource.name,
                        resource_pattern_type=resource.pattern_type,
                        principal=entry.principal,
                        host=entry.host,
                        operation=entry.operation,
                        permission_type=entry.permission,
                    )
                    for entry in new
                ]
            )
        )
        for entry, result in zip(new, response.results, strict=False):
            if result.error_code != ErrorCode.NONE:
                raise error_for_code(
                    result.error_code,
                    f"{result.error_message or ErrorCode(result.error_code).description} "
                    f"(adding {entry} to {resource})",
                )
            created.append((resource, entry))
    if as_json:
        _emit({"created": _bindings(created), "existing": _bindings(existing)}, out)


async def _remove(
    client: CoordinatorClient, plan: _Plan, args: argparse.Namespace, out: TextIO
) -> None:
    removed: list[tuple[Resource, Entry]] = []
    for resource in plan.resources:
        if plan.entries:
            listed = "\n".join(f"\t{entry}" for entry in plan.entries)
            question = (
                f"Are you sure you want to remove ACLs: \n {listed}\n from resource filter "
                f"`{resource}`? (y/N)"
            )
        else:
            question = (
                f"Are you sure you want to delete all ACLs for resource filter `{resource}`? (y/N)"
            )
        if not args.force and not _confirm(question, out):
            continue
        filters = [
            DeleteAclsRequestFilter(
                resource_type_filter=resource.resource_type,
                resource_name_filter=resource.name,
                pattern_type_filter=resource.pattern_type,
                principal_filter=entry.principal,
                host_filter=entry.host,
                operation=entry.operation,
                permission_type=entry.permission,
            )
            for entry in plan.entries
        ] or [
            DeleteAclsRequestFilter(
                resource_type_filter=resource.resource_type,
                resource_name_filter=resource.name,
                pattern_type_filter=resource.pattern_type,
                operation=AclOperation.ANY,
                permission_type=AclPermissionType.ANY,
            )
        ]
        response = await client.delete_acls(DeleteAclsRequest(filters=filters))
        for result in response.filter_results:
            if result.error_code != ErrorCode.NONE:
                raise error_for_code(
                    result.error_code,
                    f"{result.error_message or ErrorCode(result.error_code).description} "
                    f"(removing ACLs of {resource})",
                )
            for acl in result.matching_acls:
                if acl.error_code != ErrorCode.NONE:
                    raise error_for_code(acl.error_code, acl.error_message)
                removed.append(
                    (
                        Resource(
                            _enum(ResourceType, acl.resource_type),
                            acl.resource_name,
                            _enum(PatternType, acl.pattern_type),
                        ),
                        Entry(
                            acl.principal,
                            acl.host,
                            _enum(AclOperation, acl.operation),
                            _enum(AclPermissionType, acl.permission_type),
                        ),
                    )
                )
    if args.json:
        _emit({"removed": _bindings(removed)}, out)


def _confirm(question: str, out: TextIO) -> bool:
    """Ask on the terminal; without one nothing may be removed unasked."""
    if not sys.stdin.isatty():
        raise UsageError("not removing ACLs unasked: give --force, or run on a terminal to confirm")
    print(question, file=out, flush=True)
    return sys.stdin.readline().strip().lower() in ("y", "yes")


async def _list(client: CoordinatorClient, plan: _Plan, as_json: bool, out: TextIO) -> None:
    found: dict[Resource, set[Entry]] = {}
    filters: list[Resource | None] = list(plan.resources) or [None]
    for resource in filters:
        for pattern, entries in (await _describe_acls(client, resource)).items():
            found.setdefault(pattern, set()).update(entries)
    if as_json:
        bindings = [
            (resource, entry)
            for resource in sorted(found)
            for entry in sorted(found[resource])
            if not plan.principals or entry.principal in plan.principals
        ]
        _emit(_bindings(bindings), out)
        return
    if not plan.principals:
        _print_acls(found, out)
        return
    for principal in plan.principals:
        print(f"ACLs for principal `{principal}`", file=out)
        _print_acls(
            {
                resource: {entry for entry in entries if entry.principal == principal}
                for resource, entries in found.items()
            },
            out,
        )


def _print_acls(found: dict[Resource, set[Entry]], out: TextIO) -> None:
    for resource in sorted(found):
        entries = sorted(found[resource])
        if not entries:
            continue
        listed = "\n".join(f"\t{entry}" for entry in entries)
        print(f"Current ACLs for resource `{resource}`:\n{listed}\n", file=out)


def _bindings(bindings: Iterable[tuple[Resource, Entry]]) -> list[dict[str, str]]:
    return [
        {
            "resource_type": resource.resource_type.name,
            "name": resource.name,
            "pattern_type": resource.pattern_type.name,
            "principal": entry.principal,
            "host": entry.host,
            "operation": entry.operation.name,
            "permission_type": entry.permission.name,
        }
        for resource, entry in bindings
    ]


def _emit(value: object, out: TextIO) -> None:
    json.dump(value, out, indent=2)
    out.write("\n")


def _enum(kind: type[E], number: int) -> E:
    """Kafka's enum member of a number, UNKNOWN (0) for one this tool does not know."""
    try:
        return kind(number)
    except ValueError:
        return kind(0)
