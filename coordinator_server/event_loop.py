"""The event loop the commands run on: uvloop when it is installed, else asyncio's own."""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Callable, Coroutine, Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["run_async", "stopping_on_signals"]

_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)


def run_async(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    """Run `main()` to its end on uvloop when it is installed, else on asyncio's own loop."""
    try:
        import uvloop
    except ImportError:
        asyncio.run(main())
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(main())


@contextmanager
def stopping_on_signals(stop: Callable[[], None]) -> Iterator[None]:
    """SIGTERM and SIGINT call `stop` while the block runs, on the running loop; after it,
    they are ignored for the rest of the process. The process is then on its way out, and a
    signal sent again (a supervisor's or an operator's second SIGTERM) would otherwise meet
    the default action in its last milliseconds and end a clean stop with -15 instead of 0."""
    loop = asyncio.get_running_loop()
    for signum in _STOP_SIGNALS:
        loop.add_signal_handler(signum, stop)
    try:
        yield
    finally:
        for signum in _STOP_SIGNALS:
            loop.remove_signal_handler(signum)
            signal.signal(signum, signal.SIG_IGN)
