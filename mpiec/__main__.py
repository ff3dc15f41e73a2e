import sys

from mpiec.cli import main

sys.exit(main())
