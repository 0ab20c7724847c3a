"""A node's security, wired: who may connect (the listener's `ListenerSecurity`) and what
they may do (the `RequestAuthorizer` every handler checks), with the state both read.

- The security image (`security/image.py`) holds the committed ACLs and SCRAM credentials of
  the log's security partition, kept current on every node by its loader. SCRAM logins read
  their credentials from it, so a user added on any node can log in on every node within a
  second.
- `--authorizer acls` decides over the image's ACLs; `--authorizer kafka` over the data
  cluster's own, kept by `KafkaAclSource` (the image's ACLs then decide nothing, and the
  coordinator's CreateAcls and DeleteAcls are refused: the data cluster is the one source);
  `--authorizer none` checks nothing, at no cost per request.
- Each change of the ACLs in force drops the authorizer's cached decisions.

Apart from `app` because it is one concern with a life cycle of its own (a loader and, in
Kafka mode, a refresher, both waited for before the node says it is ready).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from coordinator_client.rpc.security import ClientSecurity, read_properties_file
from coordinator_server import defaults
from coordinator_server.authorizer.standard import StandardAuthorizerData
from coordinator_server.config import CoordinatorConfig
from coordinator_server.metrics import ServerMetrics
from coordinator_server.node_address import Placement
from coordinator_server.node_client import (
    NodeClient,
    NodeConnector,
    SecureNodeConnector,
    TcpNodeConnector,
)
from coordinator_server.runtime.runtime import CoordinatorRuntime
from coordinator_server.security.image import SecurityImage
from coordinator_server.security.image_loader import SecurityImageLoader
from coordinator_server.server.authentication import ListenerSecurity
from coordinator_server.server.listener_security import build_listener_security, exposure_warning
from coordinator_server.service.authorization import RequestAuthorizer
from coordinator_server.service.dispatch import RequestDispatch
from coordinator_server.service.security_service import SecurityService
from coordinator_server.shard import SecurityShard
from coordinator_server.starting import StartError
from coordinator_server.storage.api import CoordinatorLog, LogFollower
from coordinator_server.storage.kafka.acl_source import KafkaAclSource
from coordinator_server.storage.kafka.log import KafkaLog

__all__ = ["NodeSecurity"]

logger = logging.getLogger("coordinator_server.security")

ChangeListener = Callable[[], None]

# The longest a write of the security partition waits, committed, for this node's image to
# read it before it is answered anyway (a log that stopped answering reads).
SETTLE_TIMEOUT_S = 1.0


class NodeSecurity:
    """The node's listener security, authorizer, security image and their life cycle."""

    def __init__(self, config: CoordinatorConfig, metrics: ServerMetrics) -> None:
        """`metrics`: where authorization denials are counted."""
        self._config = config
        self.image = SecurityImage(self._authorizer_data())
        self.loader: SecurityImageLoader | None = None
        self.service: SecurityService | None = None
        self.kafka_acls: KafkaAclSource | None = None
        self._listeners: list[ChangeListener] = []
        self.authorizer: RequestAuthorizer | None = None
        if config.authorizer == "acls":
            self.authorizer = RequestAuthorizer(
                self.image.acls, cache_entries=config.authorizer_cache_entries
            )
            self.add_listener(self.authorizer.acls_changed)
        elif config.authorizer == "kafka":
            data_cluster = config.data_cluster
            if data_cluster is None:
                raise StartError(
                    "--authorizer kafka needs the data cluster: --lag-bootstrap-servers or "
                    "the log's --bootstrap-servers"
                )
            data = self._authorizer_data()
            self.authorizer = RequestAuthorizer(data, cache_entries=config.authorizer_cache_entries)
            self.kafka_acls = KafkaAclSource(
                data_cluster,
                data,
                refresh_interval_ms=config.authorizer_kafka_refresh_interval_ms,
                max_acls=config.max_acls,
                security=config.kafka_security,
                on_change=self.authorizer.acls_changed,
            )
        if self.authorizer is not None:
            self.authorizer.denials = metrics.authorization_denials
        try:
            self.listener: ListenerSecurity = build_listener_security(
                config, tls=config.tls_certfile is not None, scram_credentials=self.image
            )
        except (OSError, ValueError) as error:
            raise StartError(f"the listener's security settings: {error}") from None

    @property
    def _reads_image(self) -> bool:
        """Whether decisions or logins read the image."""
        return self._config.authorizer == "acls" or any(
            mechanism.startswith("SCRAM-") for mechanism in self.listener.mechanisms
        )

    def node_connector(self) -> NodeConnector:
        """How this node reaches the others of its cluster: as `--inter-node-command-config`
        says (TLS and SASL, as this node's principal), else over TLS when the nodes serve
        it, trusting the system's CAs, else plain TCP.

        Raises:
            StartError: the file cannot be read or its settings cannot work.
        """
        config = self._config
        path = config.inter_node_command_config
        if path is None:
            return TcpNodeConnector(config.peer_ssl_context())
        try:
            security = ClientSecurity.from_properties(read_properties_file(path))
            return SecureNodeConnector(security)
        except (OSError, ValueError) as error:
            raise StartError(f"--inter-node-command-config {path}: {error}") from None

    def _authorizer_data(self) -> StandardAuthorizerData:
        config = self._config
        return StandardAuthorizerData(
            config.super_user_principals,
            allow_everyone_if_no_acl_found=config.allow_everyone_if_no_acl_found,
        )

    @property
    def exposure(self) -> str | None:
        """Why the listener is open to anyone who reaches it, when it is (see
        `exposure_warning`)."""
        config = self._config
        return exposure_warning(config, host=config.host, tls=config.tls_certfile is not None)

    def add_listener(self, listener: ChangeListener) -> None:
        """Call `listener()` whenever the image changed."""
        self._listeners.append(listener)

    def _image_changed(self) -> None:
        for listener in self._listeners:
            try:
                listener()
            except Exception:
                logger.exception("a listener of the security image's changes failed")

    def start(
        self,
        dispatch: RequestDispatch,
        runtime: CoordinatorRuntime[SecurityShard],
        log: CoordinatorLog,
        *,
        placement: Placement | None,
        peers: NodeClient | None,
    ) -> None:
        """Serve the ACL and SCRAM credential APIs, and start reading the image (and, in
        Kafka mode, the data cluster's ACLs)."""
        config = self._config
        # The standbys' long-polled reads must not hold the image's up: its own connection.
        follower: LogFollower | None = (
            log.new_follower("security") if isinstance(log, KafkaLog) else log.follower
        )
        settled = None
        if follower is None:
            logger.warning("the log cannot be followed: this node keeps no ACLs or credentials")
        else:
            self.loader = loader = SecurityImageLoader(
                self.image,
                follower,
                max_wait_ms=config.security_fetch_max_wait_ms,
                max_bytes=defaults.SECURITY_FETCH_MAX_BYTES,
            )
            loader.add_listener(self._image_changed)
            loader.start()

            def settled() -> asyncio.Future[None]:
                return loader.settled(SETTLE_TIMEOUT_S)

        self.service = service = SecurityService(
            runtime,
            node_id=config.node_id,
            placement=placement,
            peers=peers,
            authorizer=self.authorizer,
            external_acls=None if self.kafka_acls is None else self.kafka_acls.data,
            settled=settled,
        )
        dispatch.serve_security(service)
        if self.kafka_acls is not None:
            self.kafka_acls.start()

    async def wait_ready(self) -> None:
        """Until decisions can be made as the node's ACLs say: the image holds what the log
        did at start (as Kafka's authorizer waits for its first load) when something reads
        it (`--authorizer acls`, or SCRAM logins), and in Kafka mode the data cluster's
        ACLs were read once (its failures are logged meanwhile, with what to fix, as a
        start waiting for its broker logs them). A node that reads neither does not wait
        for the image: it is kept for the security APIs alone."""
        if self.loader is not None and self._reads_image:
            await self.loader.wait_caught_up()
        if self.kafka_acls is not None:
            await self.kafka_acls.ready()

    def close(self) -> None:
        """Stop waiting for other nodes' answers (the listener drains)."""
        if self.service is not None:
            self.service.close()

    async def stop(self) -> None:
        if self.kafka_acls is not None:
            await self.kafka_acls.stop()
        if self.loader is not None:
            await self.loader.stop()
            self.loader = None

    def status(self) -> dict[str, object]:
        """What `/status` shows of the node's security."""
        config = self._config
        listener = self.listener
        return {
            "listener_security_protocol": listener.protocol.value,
            "sasl_enabled_mechanisms": sorted(listener.mechanisms),
            "ssl_client_auth": config.ssl_client_auth,
            "authorizer": config.authorizer,
            "acls": len(self.authorizer.data) if self.authorizer is not None else 0,
            "scram_users": len(self.image.scram_users()),
            "warning": self.exposure,
        }
