"""The event loop the commands run on: uvloop when it is installed, else asyncio's own."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

__all__ = ["run_async"]


def run_async(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `main()` to its end on uvloop when it is installed, else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())
