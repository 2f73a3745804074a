"""``python -m amqp_async``: the ``amqp-async`` command line (needs ``pip install 'amqp-async[cli]'``)."""

from __future__ import annotations

import sys

from .cli import main

if __name__ == "__main__":
    sys.exit(main())
