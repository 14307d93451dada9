"""Pinning vCenter's certificate as the README says: a TLS failure prints the sha256 thumbprint the server
presented, and that thumbprint, given to --thumbprint, connects."""

from __future__ import annotations

import hashlib
import re
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from typer.testing import CliRunner

from vgpuctl.cli.main import app

pytestmark = pytest.mark.sim


def test_tls_failure_names_the_thumbprint_to_pin(gpusim: Any, tmp_path: Path) -> None:
    env = {"VGPUCTL_URL": gpusim.url, "VGPUCTL_USERNAME": gpusim.username, "VGPUCTL_PASSWORD": gpusim.password,
           "VGPUCTL_STATE_DIR": str(tmp_path)}  # fmt: skip
    refused = CliRunner().invoke(app, ["status"], env=env)
    assert refused.exit_code == 1
    (line,) = refused.stderr.strip().splitlines()
    m = re.search(r"presented sha256 ((?:[0-9A-F]{2}:){31}[0-9A-F]{2})", line)
    assert m, line
    parts = urlsplit(gpusim.url)
    der = ssl.PEM_cert_to_DER_cert(ssl.get_server_certificate((parts.hostname, parts.port)))
    assert m[1].replace(":", "").lower() == hashlib.sha256(der).hexdigest()
    assert "--thumbprint" in line and "--ca-file" in line

    pinned = CliRunner().invoke(app, ["status", "--thumbprint", m[1], "-o", "json"], env=env)
    assert pinned.exit_code == 0, pinned.output
