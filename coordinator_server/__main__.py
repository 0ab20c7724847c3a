import sys

from coordinator_server.cli import main

sys.exit(main())
