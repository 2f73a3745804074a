"""Shared pytest configuration.

Hypothesis profiles: ``dev`` (Hypothesis' defaults) for local runs; ``ci`` (more examples, no deadline, as
shared CI machines have noisy timings), selected when the environment variable ``CI`` is ``true``.
``HYPOTHESIS_PROFILE`` overrides the choice.
"""

from __future__ import annotations

import os

from hypothesis import settings

settings.register_profile("ci", max_examples=200, deadline=None)
settings.register_profile("dev")
_default = "ci" if os.environ.get("CI", "").lower() == "true" else "dev"
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", _default))
