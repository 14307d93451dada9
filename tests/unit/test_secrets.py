"""Session secrets are known to the redaction registry as soon as a login hands them out."""

from __future__ import annotations

import json
from typing import Any

import pytest

from vgpuctl import trace
from vgpuctl.guest import runner
from vgpuctl.vsphere.rest import LEGACY_SESSION, RestClient
from vgpuctl.vsphere.session import ConnectionSettings

pytestmark = pytest.mark.unit


def rest_client_logged_in_with(token: str) -> Any:
    """A RestClient whose login (the legacy path, as govmomi's simulator serves it) answers `token`."""
    import requests
    import requests.adapters

    class Adapter(requests.adapters.BaseAdapter):
        def send(self, request: Any, **kwargs: Any) -> Any:
            response = requests.Response()
            legacy = request.url.endswith(LEGACY_SESSION)
            response.status_code = 200 if legacy else 404
            response._content = json.dumps({"value": token}).encode() if legacy else b""
            response.url = request.url
            return response

        def close(self) -> None:
            pass

    http = requests.Session()
    http.mount("https://", Adapter())
    return RestClient(ConnectionSettings(url="vc.example.com", username="u", password="rest-pw-0d3a"), http)


def test_the_rest_token_and_password_are_secrets(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(trace, "_SECRET_VALUES", set())
    monkeypatch.setenv("SAVED_API_HANDLE", "c0ffee-token-9f2e")
    assert "SAVED_API_HANDLE" not in runner.secret_env_names()
    rest_client_logged_in_with("c0ffee-token-9f2e")
    assert trace.redact("id c0ffee-token-9f2e, pw rest-pw-0d3a") == "id ***, pw ***"
    assert "SAVED_API_HANDLE" in runner.secret_env_names()  # a guest run started now would not get it
