import sys

from profiling.report.cli import main

sys.exit(main())
