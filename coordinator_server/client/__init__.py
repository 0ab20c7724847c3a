"""Deprecated: the client library is its own distribution now, `coordinator-client`, imported
as `coordinator_client` (`from coordinator_client import GroupMember`).

This name keeps the applications written against it working for one more release: it warns
once (DeprecationWarning) and hands out the very same objects and modules, so that
`from coordinator_server.client import GroupMember` and
`from coordinator_server.client.member import GroupMember` both still work (and `isinstance`
checks agree across the two names). It will be removed in the release after next.
"""

from __future__ import annotations

import importlib
import sys
import warnings

import coordinator_client
from coordinator_client import *  # noqa: F403 (the very names the library exports)

__all__ = coordinator_client.__all__

warnings.warn(
    "coordinator_server.client is deprecated: install coordinator-client and import "
    "coordinator_client instead (the same names and modules)",
    DeprecationWarning,
    stacklevel=2,
)

# The library's modules under their old names too. Registered as the very module objects,
# not copies, so that a later `import coordinator_server.client.member` finds them here.
_MODULES = ("assignors", "consumer", "errors", "member", "producer", "sticky")
for _name in _MODULES:
    _module = importlib.import_module(f"coordinator_client.{_name}")
    sys.modules[f"{__name__}.{_name}"] = _module
    globals()[_name] = _module
