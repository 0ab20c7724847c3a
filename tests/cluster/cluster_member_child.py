"""A ClusterMembership in a process of its own, for the test that kills a node (SIGKILL: no
LeaveGroup, no clean close). It prints "joined <generation> <p,p,...>" once it has its first
assignment, then serves until killed."""

from __future__ import annotations

import argparse
import asyncio

from coordinator_server.cluster.membership import ClusterMembership


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap-servers", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--cluster-id", required=True)
    parser.add_argument("--node-id", type=int, required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--session-timeout-ms", type=int, required=True)
    parser.add_argument("--heartbeat-interval-ms", type=int, required=True)
    args = parser.parse_args()
    membership = ClusterMembership(
        bootstrap_servers=args.bootstrap_servers,
        topic=args.topic,
        cluster_id=args.cluster_id,
        node_id=args.node_id,
        host="127.0.0.1",
        port=args.port,
        session_timeout_ms=args.session_timeout_ms,
        heartbeat_interval_ms=args.heartbeat_interval_ms,
        on_change=lambda view: None,
    )
    await membership.start()
    owned = ",".join(str(p) for p in sorted(membership.view.mine_owned))
    print(f"joined {membership.view.generation} {owned}", flush=True)
    await asyncio.Event().wait()


if __name__ == "__main__":
    asyncio.run(main())
