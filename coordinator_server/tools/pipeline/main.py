"""The pipeline as a Spark application file, for `spark-submit`:

    spark-submit [spark options] .../coordinator_server/tools/pipeline/main.py history --output ...

takes the same arguments as `coordinator-server analyze`.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from coordinator_server.tools.pipeline import cli


def run(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="coordinator-server")
    cli.add_parser(parser.add_subparsers(dest="command", required=True))
    given = list(sys.argv[1:] if argv is None else argv)
    return cli.main(parser.parse_args(["analyze", *given]))


if __name__ == "__main__":
    sys.exit(run())
