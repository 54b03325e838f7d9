from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on loopback whose listener never accepts: a request sent there connects (the
    kernel's backlog) and is never answered, as by a server stuck behind a full queue."""
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        yield listener.getsockname()[1]
