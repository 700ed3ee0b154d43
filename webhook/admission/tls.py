"""A serving TLS context that follows its certificate files (cert-manager, Secret volumes), as controller-runtime's
certwatcher: the files compared on a timer, a new pair swapped in only once it loads (a broken or half-written pair
never breaks serving), handed to each handshake by the SNI callback."""
from __future__ import annotations

import datetime
import hashlib
import logging
import ssl
from pathlib import Path

from .. import metrics
from . import pem
from ..background import Background, Companion

log = logging.getLogger("webhook.tls")

# The kubelet refreshes Secret volumes about once a minute; a few seconds more is noise.
DEFAULT_INTERVAL = 5.0
# Say so in time: with an expired certificate every call fails and, with failurePolicy
# Ignore, VMs quietly start unpinned.
EXPIRY_WARNING = datetime.timedelta(days=14)


def build_context(cert_file: str | Path, key_file: str | Path, client_ca_file: str | Path | None = None) -> ssl.SSLContext:
    """A server context holding this pair; pem.BadFile naming the file when it does not load. With a client CA,
    only clients presenting a certificate it signed get in (mutual TLS)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # No TLS 1.3 session tickets: kube-apiserver's webhook client keeps no session cache (client-go's
    # TLSConfigFor sets no ClientSessionCache), so it never resumes, and making the two tickets
    # OpenSSL sends by default is a sixth of the handshake's CPU (docs/performance.md), paid by
    # every connection a drain's burst opens.
    context.num_tickets = 0
    try:
        context.load_cert_chain(str(cert_file), str(key_file))  # also checks that the key matches
        if client_ca_file:
            context.load_verify_locations(cafile=str(client_ca_file))
    except OSError as exc:  # ssl's own error names no file (a missing one, a directory, "[SSL] PEM lib")
        pem.diagnose(cert_file, key_file, client_ca_file)
        raise pem.BadFile(pem.CERTIFICATE, cert_file, f"refused with {key_file}: {exc}") from None
    if client_ca_file:
        context.verify_mode = ssl.CERT_REQUIRED
    return context


def _describe(cert_file: Path) -> dict[str, object]:
    """Serial, expiry and names of the certificate being served, for the log and the metrics."""
    from cryptography import x509

    try:
        cert = x509.load_pem_x509_certificate(cert_file.read_bytes())
        names = list(cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value)
    except (OSError, ValueError):
        return {}
    except x509.ExtensionNotFound:
        names = []
    return {"serial": format(cert.serial_number, "x"), "not_after": cert.not_valid_after_utc.isoformat(),
            "sans": [str(name.value) for name in names]}


class ReloadingTLS(Companion):
    """Serve the newest good pair from `cert_file`/`key_file`; `context` goes to the listener."""

    def __init__(self, cert_file: str | Path, key_file: str | Path, interval: float = DEFAULT_INTERVAL,
                 client_ca_file: str | Path | None = None):
        self.cert_file = Path(cert_file)
        self.key_file = Path(key_file)
        self.client_ca_file = Path(client_ca_file) if client_ca_file else None
        self._good = self._digest()  # the pair being served
        self._suspect = ""  # a pair that failed to load once
        self._reported = ""  # a pair that failed twice and was logged
        # The first load must work: a webhook without a certificate cannot serve at all.
        self.context = build_context(self.cert_file, self.key_file, self.client_ca_file)
        self.context.sni_callback = self._pick
        self._current = self.context
        self.task = Background("tls-reload", self._tick, log=log, failure="checking the serving certificate "
                               "failed", period=interval, wait_first=True)
        self._loaded("serving certificate loaded")

    def _digest(self) -> str:
        """What is being served: the pair, and the client CA when there is one (it rotates too)."""
        files = (self.cert_file, self.key_file, self.client_ca_file)
        try:
            return hashlib.sha256(b"\0".join(f.read_bytes() for f in files if f is not None)).hexdigest()
        except OSError as exc:
            return f"unreadable: {exc}"

    def _pick(self, ssl_object: ssl.SSLObject, server_name: str | None, outer: ssl.SSLContext) -> None:
        if self._current is not outer:
            ssl_object.context = self._current

    def reload(self) -> bool:
        """Load the files if their contents changed; True when a new pair is now served."""
        digest = self._digest()
        if digest in (self._good, self._reported):
            return False
        try:
            fresh = build_context(self.cert_file, self.key_file, self.client_ca_file)
        except (OSError, ssl.SSLError, ValueError) as exc:
            if digest != self._suspect:
                # Maybe caught between two writes (cert replaced, key not yet): look again next tick.
                self._suspect = digest
                return False
            self._reported = digest  # log a bad pair once, not on every tick
            log.error(
                "new serving certificate (or client CA) ignored, still serving the previous one",
                extra={"fields": {"cert": str(self.cert_file), "key": str(self.key_file), "reason": str(exc)}},
            )
            return False
        if self._digest() != digest:
            return False  # changed while loading: the context may hold a mix; retry next tick
        self._good = digest
        self._current = fresh
        self._loaded("serving certificate reloaded")
        return True

    def _loaded(self, message: str) -> None:
        info = _describe(self.cert_file)
        log.info(message, extra={"fields": info})
        if info:
            not_after = datetime.datetime.fromisoformat(str(info["not_after"]))
            metrics.CERT_EXPIRY.set(not_after.timestamp())
            if not_after - datetime.datetime.now(datetime.timezone.utc) < EXPIRY_WARNING:
                log.warning("serving certificate expires soon", extra={"fields": {"not_after": info["not_after"]}})

    async def _tick(self) -> None:
        self.reload()
