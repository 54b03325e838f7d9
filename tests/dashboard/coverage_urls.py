"""The project's URLconf with a host's write routes beside it (tests/dashboard/test_coverage.py)."""

from idemdash.urls import urlpatterns as project
from tests.receipts.coverage_urls import urlpatterns as host

urlpatterns = [*project, *host]
