"""`python -m testbed.topology up|show|down FILE`: the namespace back end's topology by hand."""

import sys

from .endpoints.netns.topology import main

if __name__ == "__main__":
    sys.exit(main())
