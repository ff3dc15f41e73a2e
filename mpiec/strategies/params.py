"""Public path kept for plug-ins: the public names of ``mpiec.strategies.api.params``.

The API lives in ``mpiec/strategies/api/``; plug-ins written before it moved there import this
path, which stays (``tests/strategies/test_api_paths.py`` checks it re-exports every name).
"""

from mpiec.strategies.api.params import *  # noqa: F403 (the public names of the API module)
