"""A scripted coordinator for the security tools, on a thread of its own (the tools run their
own event loop): ACLs kept in memory and selected with the authorizer's own filters, SCRAM
credentials kept as they arrive, ApiVersions and ListGroups answered for the other commands,
and any answer replaced by the test (`refuse`). With a `FakeSasl` it authenticates as a SASL
listener does."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from client_fake_server import FakeCoordinator, FakeSasl, Received

from coordinator_protocol.api_keys import ApiKey
from coordinator_server.authorizer.acls import (
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
    StandardAcl,
)


@dataclass
class SecurityState:
    acls: list[StandardAcl] = field(default_factory=list)
    credentials: dict[tuple[str, int], dict[str, Any]] = field(default_factory=dict)
    refuse: dict[int, dict[str, Any]] = field(default_factory=dict)
    """An answer to send instead, by api key."""

    def handle(self, received: Received) -> dict[str, Any] | None:
        if received.api_key in self.refuse:
            return self.refuse[received.api_key]
        body = received.body
        if received.api_key == ApiKey.API_VERSIONS:
            return {"error_code": 0, "api_keys": []}
        if received.api_key == ApiKey.LIST_GROUPS:
            return {"error_code": 0, "groups": [{"group_id": "orders", "protocol_type": ""}]}
        if received.api_key == ApiKey.CREATE_ACLS:
            for creation in body["creations"]:
                acl = StandardAcl(
                    ResourceType(creation["resource_type"]),
                    creation["resource_name"],
                    PatternType(creation["resource_pattern_type"]),
                    creation["principal"],
                    creation["host"],
                    AclOperation(creation["operation"]),
                    AclPermissionType(creation["permission_type"]),
                )
                if acl not in self.acls:
                    self.acls.append(acl)
            return {"results": [{"error_code": 0} for _ in body["creations"]]}
        if received.api_key == ApiKey.DESCRIBE_ACLS:
            selected = [acl for acl in self.acls if _filter(body).matches(acl)]
            resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
            for acl in selected:
                key = (acl.resource_type, acl.resource_name, acl.pattern_type)
                resources.setdefault(key, []).append(_entry(acl))
            return {
                "error_code": 0,
                "resources": [
                    {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                    for (t, n, p), acls in resources.items()
                ],
            }
        if received.api_key == ApiKey.DELETE_ACLS:
            results = []
            for wanted in body["filters"]:
                selected = [acl for acl in self.acls if _filter(wanted).matches(acl)]
                self.acls = [acl for acl in self.acls if acl not in selected]
                results.append(
                    {
                        "error_code": 0,
                        "matching_acls": [
                            {
                                "error_code": 0,
                                "resource_type": acl.resource_type,
                                "resource_name": acl.resource_name,
                                "pattern_type": acl.pattern_type,
                                **_entry(acl),
                            }
                            for acl in selected
                        ],
                    }
                )
            return {"filter_results": results}
        if received.api_key == ApiKey.ALTER_USER_SCRAM_CREDENTIALS:
            users = []
            for deletion in body["deletions"]:
                self.credentials.pop((deletion["name"], deletion["mechanism"]), None)
                users.append(deletion["name"])
            for upsertion in body["upsertions"]:
                self.credentials[(upsertion["name"], upsertion["mechanism"])] = upsertion
                users.append(upsertion["name"])
            return {"results": [{"user": user, "error_code": 0} for user in users]}
        if received.api_key == ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS:
            names = sorted({name for name, _ in self.credentials})
            if body["users"] is not None:
                names = [user["name"] for user in body["users"]]
            results = []
            for name in names:
                infos = [
                    {"mechanism": mechanism, "iterations": value["iterations"]}
                    for (user, mechanism), value in sorted(self.credentials.items())
                    if user == name
                ]
                if infos:
                    results.append({"user": name, "error_code": 0, "credential_infos": infos})
                else:
                    results.append(
                        {
                            "user": name,
                            "error_code": 91,
                            "error_message": "Attempt to describe a user credential that does "
                            "not exist",
                        }
                    )
            return {"error_code": 0, "results": results}
        return None


def _filter(body: dict[str, Any]) -> AclBindingFilter:
    return AclBindingFilter(
        ResourceType(body["resource_type_filter"]),
        body["resource_name_filter"],
        PatternType(body["pattern_type_filter"]),
        body["principal_filter"],
        body["host_filter"],
        AclOperation(body["operation"]),
        AclPermissionType(body["permission_type"]),
    )


def _entry(acl: StandardAcl) -> dict[str, Any]:
    return {
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation,
        "permission_type": acl.permission,
    }


@dataclass
class RunningServer:
    fake: FakeCoordinator
    state: SecurityState

    @property
    def bootstrap(self) -> str:
        return self.fake.bootstrap

    def requests(self, api_key: int) -> list[Received]:
        return self.fake.requests(api_key)


@contextmanager
def security_server(sasl: FakeSasl | None = None) -> Iterator[RunningServer]:
    """The scripted coordinator, serving on a thread of its own until the block ends."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, name="security tool server", daemon=True)
    thread.start()
    state = SecurityState()
    fake = FakeCoordinator(state.handle, sasl=sasl)

    async def start() -> None:
        await fake.start()

    asyncio.run_coroutine_threadsafe(start(), loop).result(10)
    try:
        yield RunningServer(fake, state)
    finally:
        asyncio.run_coroutine_threadsafe(fake.stop(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        loop.close()
