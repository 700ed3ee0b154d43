"""The proxy the environment names for the API server, looked up once (cluster/client.py)."""
import pytest

from webhook.cluster import client

API = "https://10.96.0.1:443"


@pytest.fixture(autouse=True)
def no_proxy_set(monkeypatch):
    for name in ("HTTPS_PROXY", "HTTP_PROXY", "NO_PROXY", "https_proxy", "http_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)


def test_the_https_proxy_is_used_for_the_api_server(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    assert client.env_proxy(API) == ("http://proxy.corp:3128", None)


def test_credentials_in_the_proxy_url_go_in_a_header_not_in_the_url(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.corp:3128")
    assert client.env_proxy(API) == ("http://proxy.corp:3128", {"Proxy-Authorization": "Basic dXNlcjpzZWNyZXQ="})


@pytest.mark.parametrize("environment", [{}, {"HTTP_PROXY": "http://proxy.corp:3128"},
                                         {"HTTPS_PROXY": "http://proxy.corp:3128", "NO_PROXY": "10.96.0.1"}],
                         ids=["none", "http-only", "no-proxy"])
def test_no_proxy_when_the_environment_names_none_for_the_api_server(monkeypatch, environment):
    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    assert client.env_proxy(API) is None


async def test_the_api_client_carries_the_proxy(monkeypatch):
    monkeypatch.setenv("HTTPS_PROXY", "http://user:secret@proxy.corp:3128")
    from kubernetes_asyncio.client import Configuration

    configuration = Configuration(host=API)
    await client.new_api_client(configuration).close()
    assert (configuration.proxy, configuration.proxy_headers) == (
        "http://proxy.corp:3128", {"Proxy-Authorization": "Basic dXNlcjpzZWNyZXQ="})
