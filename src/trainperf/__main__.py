import sys

from trainperf.cli.main import main

sys.exit(main())
