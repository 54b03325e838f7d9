import sys

from idemdash.devtools.soak.run import main

sys.exit(main())
