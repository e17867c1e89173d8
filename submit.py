#!/usr/bin/env python3
"""Submit a profiled ResNet18 DDP job: ``python submit.py --help``."""

import sys

from jobs.commands.submit import main

if __name__ == "__main__":
    sys.exit(main())
