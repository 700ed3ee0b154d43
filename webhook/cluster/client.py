"""The one way every verb connects to the cluster, and the raw requests: `request`, and `Api`'s JSON in and out for what
writes settings (`certs`, `spare-vms`). Credentials as kubectl finds them: `--kubeconfig` alone, else in-cluster,
else `KUBECONFIG`, else `~/.kube/config`."""
from __future__ import annotations

import asyncio
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any


class NoCredentials(Exception):
    """No source of cluster credentials worked; the message names each one tried."""


class ApiUnreachable(Exception):
    """The request never got an HTTP answer (connection refused, TLS, DNS, timeout)."""

    def __init__(self, message: str, *, timed_out: bool = False):
        super().__init__(message)
        self.timed_out = timed_out


async def connect(kubeconfig: str | None = None, context: str | None = None) -> Any:
    """A kubernetes-asyncio ApiClient for the cluster, or NoCredentials. A `context` is one of a
    kubeconfig's (in-cluster credentials have none): with it, the in-cluster ones are not tried."""
    try:
        Path.home()
    except RuntimeError:  # kubernetes_asyncio.config calls it on import: for a uid with no passwd entry, HOME `/`
        os.environ["HOME"] = "/"  # as the image sets it
    import yaml
    from kubernetes_asyncio import client, config

    tried: list[str] = []
    configuration = client.Configuration()

    async def from_file(path: str, label: str) -> bool:
        problem = kubeconfig_problem(Path(path).expanduser(), context)
        if problem is not None and problem.startswith("context "):
            raise NoCredentials(f"{problem} in {label}")  # as kubectl says it; no other file is tried
        if problem is not None:
            tried.append(f"{label} ({problem})")
            return False
        try:
            await config.load_kube_config(config_file=path, context=context, client_configuration=configuration)
        except (config.ConfigException, OSError, ValueError, TypeError, KeyError, AttributeError, yaml.YAMLError) as exc:
            tried.append(f"{label} (not a usable kubeconfig: {_short(exc)})")
            return False
        return True

    if kubeconfig is not None:
        if await from_file(kubeconfig, f"--kubeconfig {kubeconfig}"):
            return new_api_client(configuration)
        raise NoCredentials("no credentials for the cluster: tried " + "; ".join(tried))
    if context is not None:
        tried.append(f"in-cluster (not with --context {context})")
    elif os.environ.get(config.incluster_config.SERVICE_HOST_ENV_NAME):
        try:
            config.load_incluster_config(client_configuration=configuration)
            return new_api_client(configuration)
        except (config.ConfigException, OSError) as exc:
            tried.append(f"in-cluster ({_short(exc)})")
    else:
        tried.append(f"in-cluster ({config.incluster_config.SERVICE_HOST_ENV_NAME} not set)")
    env = os.environ.get("KUBECONFIG")
    if not env:
        tried.append("KUBECONFIG (not set)")
    elif await from_file(_first_existing(env, env.split(os.pathsep)[0]), f"KUBECONFIG={env}"):
        return new_api_client(configuration)
    home = Path("~/.kube/config").expanduser()
    if await from_file(str(home), str(home)):
        return new_api_client(configuration)
    raise NoCredentials("no credentials for the cluster: tried " + "; ".join(tried))


def kubeconfig_problem(path: Path, context: str | None) -> str | None:
    """What makes `path` no kubeconfig to read `context` (else its current-context) from, in words;
    None when it may be one (the client library then judges the rest)."""
    import yaml

    if path.is_dir():
        return "a directory, not a file"
    try:
        loaded = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return "no such file"
    except (OSError, ValueError, yaml.YAMLError) as exc:
        return f"not a usable kubeconfig: {_short(exc)}"
    if loaded is None:
        return "empty: not a kubeconfig"
    if not isinstance(loaded, dict):
        return f"not a kubeconfig: a YAML {type(loaded).__name__}, not a mapping of clusters, contexts and users"
    contexts = loaded.get("contexts") if isinstance(loaded.get("contexts"), list) else []
    names = [c.get("name") for c in contexts if isinstance(c, dict)]
    if context is not None and context not in names:
        return f'context "{context}" does not exist'
    return None


def _first_existing(paths: str, otherwise: str) -> str:
    """The first file of a KUBECONFIG path list that exists: the one a single-file client reads."""
    return next((p for p in paths.split(os.pathsep) if p and Path(p).expanduser().exists()), otherwise)


def context_namespace(kubeconfig: str | None = None, context: str | None = None) -> str:
    """The namespace of the kubeconfig's context (`--context`, else its current-context), as kubectl
    takes it when no -n is given; `default` when it names none or there is no kubeconfig."""
    import yaml

    path = _first_existing(os.environ.get("KUBECONFIG", ""), "~/.kube/config") if kubeconfig is None else kubeconfig
    try:
        loaded = yaml.safe_load(Path(path).expanduser().read_text(encoding="utf-8"))
    except (OSError, ValueError, yaml.YAMLError):
        return "default"
    if not isinstance(loaded, dict):
        return "default"
    wanted = context or loaded.get("current-context")
    contexts = loaded.get("contexts") if isinstance(loaded.get("contexts"), list) else []
    found = next((c.get("context") for c in contexts if isinstance(c, dict) and c.get("name") == wanted), None)
    namespace = found.get("namespace") if isinstance(found, dict) else None
    return namespace if isinstance(namespace, str) and namespace else "default"


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 120 else text[:119] + "…"


def new_api_client(configuration: Any) -> Any:
    """kubernetes-asyncio's ApiClient with the proxy the environment names looked up once (`env_proxy`):
    its session's `trust_env=True` reads ~/.netrc and the proxy variables in a thread on every request."""
    import aiohttp
    from kubernetes_asyncio import client

    if not configuration.proxy and (found := env_proxy(configuration.host)) is not None:
        configuration.proxy, headers = found
        configuration.proxy_headers = headers or configuration.proxy_headers
    api = client.ApiClient(configuration)
    trusting = api.rest_client.pool_manager
    # aiohttp's default read buffer, not kubernetes-asyncio's 2 MiB: our watch reader does not
    # need a whole event in the buffer, and six watches streaming at start add up.
    api.rest_client.pool_manager = aiohttp.ClientSession(connector=trusting.connector, trust_env=False)
    trusting.detach()  # hands the connector over; the old session is closed without closing it
    return api


def env_proxy(host: str) -> tuple[str, dict[str, str] | None] | None:
    """The proxy the environment names for `host` (the standard library's reading of *_PROXY and
    NO_PROXY), without its credentials, and the header that carries them; None for no proxy."""
    import base64
    import urllib.request

    import yarl

    url = yarl.URL(host)
    proxy = urllib.request.getproxies().get(url.scheme)
    if not proxy or (url.host and urllib.request.proxy_bypass(url.host)):
        return None
    parsed = yarl.URL(proxy if "://" in proxy else f"http://{proxy}")
    if parsed.user is None:
        return str(parsed), None
    credentials = base64.b64encode(f"{parsed.user}:{parsed.password or ''}".encode("latin1")).decode()
    return str(parsed.with_user(None)), {"Proxy-Authorization": f"Basic {credentials}"}


async def open_response(api: Any, method: str, path: str, *, query: Sequence[tuple[str, str]] = (),
                        body: Any = None, content_type: str = "application/json", timeout: float | None) -> Any:
    """The raw response of one call through kubernetes-asyncio (its auth and TLS), unread:
    for streams (watches). The caller closes it. Non-2xx answers are returned, not raised."""
    headers = {"Accept": "application/json"}
    if body is not None:
        headers["Content-Type"] = content_type
    return await api.call_api(
        path, method, query_params=list(query), header_params=headers, body=body,
        auth_settings=["BearerToken"], _preload_content=False, _request_timeout=timeout,
    )


async def request(api: Any, method: str, path: str, *, query: Sequence[tuple[str, str]] = (), body: Any = None,
                  content_type: str = "application/json", timeout: float | None) -> tuple[int, bytes]:
    """One call, read whole and released, within `timeout` in all: (status, body bytes). Raises
    ApiUnreachable when no HTTP answer came (a timeout included); the caller judges the status."""
    try:
        async with asyncio.timeout(timeout):  # also bounds a client that ignores its own timeout
            response = await open_response(api, method, path, query=query, body=body, content_type=content_type,
                                           timeout=timeout)
            try:
                raw = await response.read()
            finally:
                response.release()
    except Exception as exc:  # connection refused, TLS, DNS, timeout
        timed_out = isinstance(exc, TimeoutError)
        what = "timed out" if timed_out else f"{type(exc).__name__}: {exc}"
        raise ApiUnreachable(f"cannot reach the API for {method} {path}: {what}", timed_out=timed_out) from None
    return response.status, raw


MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"


class KubeError(Exception):
    """The API refused or could not be reached; the message says what to check."""


class Api:
    """`timeout`: seconds to wait for each answer (`--request-timeout`)."""

    def __init__(self, api_client: Any, timeout: float = 30.0):
        self._api = api_client
        self.timeout = timeout

    async def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> tuple[int, Any]:
        try:
            status, raw = await request(self._api, method, path, body=body, content_type=content_type,
                                        timeout=self.timeout)
        except ApiUnreachable as exc:
            raise KubeError(str(exc)) from None
        try:
            return status, json.loads(raw) if raw else None
        except (ValueError, TypeError):
            return status, None

    async def close(self) -> None:
        await self._api.close()


def failure(status: int, body: Any, what: str) -> KubeError:
    message = body.get("message") if isinstance(body, dict) else None
    hint = {403: " (check the RBAC of this ServiceAccount)", 404: " (not found)"}.get(status, "")
    return KubeError(f"{what}: API answered {status}{hint}" + (f": {message}" if message else ""))
