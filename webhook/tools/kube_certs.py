"""The self-managed certificate path in a cluster: a Secret for the pair, the CA in caBundle.

As kube-webhook-certgen, but a pair is kept only while good for these names with over a third of its life left, and a
renewal leaves the previous CA in caBundle until the next run; writes carry the resourceVersion just read (409, not a
lost update).
"""
from __future__ import annotations

import base64
import datetime

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from ..cluster import client
from ..kinds import MUTATING_WEBHOOK, SECRET, meta
from . import certs
from ..cluster.client import MERGE_PATCH, Api, KubeError, failure as _failure

SECRET_KEYS = ("ca.crt", "tls.crt", "tls.key")
ATTEMPTS = 5  # on 409 Conflict: read again and retry


# --------------------------------------------------------------------------- the pair


def _load_certs(pem: bytes) -> list[x509.Certificate]:
    try:
        return x509.load_pem_x509_certificates(pem)
    except ValueError:
        return []


def reusable(data: dict[str, bytes], names: list[str], now: datetime.datetime | None = None) -> certs.Bundle | None:
    """The pair in `data` when it can keep serving `names` for a while; None when it must be renewed."""
    now = now or datetime.datetime.now(datetime.timezone.utc)
    try:
        ca = x509.load_pem_x509_certificate(data["ca.crt"])
        cert = x509.load_pem_x509_certificate(data["tls.crt"])
        key = serialization.load_pem_private_key(data["tls.key"], password=None)
        cert.verify_directly_issued_by(ca)
        sans = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except Exception:  # missing, unparsable, not signed by this CA, no SANs: anything off means renew
        return None
    spki = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    if key.public_key().public_bytes(*spki) != cert.public_key().public_bytes(*spki):
        return None
    present = {str(v) for kind in (x509.DNSName, x509.IPAddress) for v in sans.get_values_for_type(kind)}
    if not set(names) <= present:
        return None
    start, end = cert.not_valid_before_utc, min(cert.not_valid_after_utc, ca.not_valid_after_utc)
    if not start <= now or end - now < (end - start) / 3:
        return None
    return certs.Bundle(ca_cert=data["ca.crt"], cert=data["tls.crt"], key=data["tls.key"])


def _unb64(text: str | None) -> bytes:
    """The bytes of a base64 value; none for an absent or a malformed one."""
    try:
        return base64.b64decode(text or "")
    except ValueError:
        return b""


def _secret_data(bundle: certs.Bundle) -> dict[str, str]:
    values = (bundle.ca_cert, bundle.cert, bundle.key)
    return {key: base64.b64encode(value).decode() for key, value in zip(SECRET_KEYS, values)}


def _written(status: int, answer: object, what: str) -> bool:
    """Whether a write went through: False on 409 Conflict (read again and retry), KubeError on a failure."""
    if status == 409:
        return False
    if not 200 <= status < 300:
        raise _failure(status, answer, what)
    return True


async def sync_secret(api: Api, namespace: str, name: str, names: list[str],
                      days: int) -> tuple[certs.Bundle, str, bytes | None]:
    """Make Secret `namespace/name` hold a good pair for `names`: keep, renew or create it; the pair, what was
    done (created, renewed, kept) and the CA a renewal replaced, still trusted for a while."""
    now = datetime.datetime.now(datetime.timezone.utc)
    path, what = SECRET.path(namespace, name), f"Secret {namespace}/{name}"
    for _ in range(ATTEMPTS):
        status, secret = await api.request("GET", path)
        if status == 404:
            # Our manifests create the Secret empty, so the Job needs no `create` on secrets.
            bundle = certs.generate(names, days=days)
            body = {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
                    "metadata": {"name": name, "namespace": namespace}, "data": _secret_data(bundle)}
            if _written(*await api.request("POST", SECRET.path(namespace), body), f"creating {what}"):
                return bundle, "created", None
            continue  # created meanwhile by someone else: read it
        if status != 200 or not isinstance(secret, dict):
            raise _failure(status, secret, f"reading {what}")
        data = {key: _unb64((secret.get("data") or {}).get(key)) for key in SECRET_KEYS}
        kept = reusable(data, names, now)
        if kept is not None:
            return kept, "kept", None
        bundle = certs.generate(names, days=days)
        patch = {"metadata": {"resourceVersion": meta(secret).get("resourceVersion")}, "data": _secret_data(bundle)}
        if _written(*await api.request("PATCH", path, patch, MERGE_PATCH), f"writing {what}"):
            replaced = _load_certs(data["ca.crt"])
            still_valid = len(replaced) == 1 and replaced[0].not_valid_after_utc > now
            return bundle, "renewed" if data["tls.crt"] else "created", data["ca.crt"] if still_valid else None
    raise KubeError(f"{what} kept changing under us ({ATTEMPTS} conflicts); run again")


# --------------------------------------------------------------------------- caBundle


def _ders(pem: bytes) -> list[bytes]:
    return [c.public_bytes(serialization.Encoding.DER) for c in _load_certs(pem)]


async def patch_webhook(api: Api, name: str, ca: bytes, previous_ca: bytes | None = None) -> int:
    """Put `ca` (and `previous_ca`, during a rotation) into the caBundle of every webhook of `name`; how many changed (a
    caBundle that already trusts `ca` is left alone, keeping an earlier rotation's overlap)."""
    wanted = ca + (previous_ca or b"")
    path, what = MUTATING_WEBHOOK.path(None, name), f"MutatingWebhookConfiguration {name}"
    for _ in range(ATTEMPTS):
        status, config = await api.request("GET", path)
        if status != 200 or not isinstance(config, dict):
            raise _failure(status, config, f"reading {what}")
        webhooks = config.get("webhooks") or []
        if not webhooks:
            raise KubeError(f"{what} has no webhooks")
        changed = 0
        for webhook in webhooks:
            client_config = webhook.setdefault("clientConfig", {})
            current = _unb64(client_config.get("caBundle"))
            up_to_date = _ders(current) == _ders(wanted) if previous_ca else set(_ders(ca)) <= set(_ders(current))
            if not up_to_date:
                client_config["caBundle"] = base64.b64encode(wanted).decode()
                changed += 1
        if not changed:
            return 0
        patch = {"metadata": {"resourceVersion": meta(config).get("resourceVersion")}, "webhooks": webhooks}
        if _written(*await api.request("PATCH", path, patch, MERGE_PATCH), f"patching {what}"):
            return changed
    raise KubeError(f"{what} kept changing under us ({ATTEMPTS} conflicts); run again")


# --------------------------------------------------------------------------- the CLI action


async def run(names: list[str], *, namespace: str, days: int, secret: str | None, webhook: str | None,
              out: str | None, kubeconfig: str | None, timeout: float | None = None) -> list[str]:
    """`certs --secret/--patch-webhook`: what happened, one line per step."""
    done: list[str] = []
    api = Api(await client.connect(kubeconfig), timeout=timeout or 30.0)
    try:
        previous_ca = None
        if secret:
            bundle, action, previous_ca = await sync_secret(api, namespace, secret, names, days)
            expires = x509.load_pem_x509_certificate(bundle.cert).not_valid_after_utc.date().isoformat()
            done.append(f"Secret {namespace}/{secret}: {action}, valid until {expires}")
        else:
            bundle = certs.generate(names, days=days)
        if out:
            certs.write(bundle, out)
            done.append(f"wrote {out}/ca.crt, {out}/tls.crt, {out}/tls.key")
        if webhook:
            changed = await patch_webhook(api, webhook, bundle.ca_cert, previous_ca)
            state = f"caBundle set on {changed} webhook(s)" if changed else "caBundle already trusts this CA"
            if previous_ca:
                state += " (with the previous CA until the next run)"
            done.append(f"MutatingWebhookConfiguration {webhook}: {state}")
    finally:
        await api.close()
    return done
