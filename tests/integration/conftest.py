"""Fixtures shared by the integration modules."""

from __future__ import annotations

import pytest

from tests.integration.tls_support import Pki, make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """A throwaway CA with a broker and a client certificate (one per module)."""
    return make_pki(tmp_path_factory.mktemp("pki"))
