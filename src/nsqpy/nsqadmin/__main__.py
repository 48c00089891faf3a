"""``python -m nsqpy.nsqadmin``: the same program as the ``nsqadmin`` console script."""

import sys

from nsqpy.nsqadmin.app import main

sys.exit(main())
