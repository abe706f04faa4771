"""TLS between chainlets: the files a chainlet server is given, and the SSL contexts made from them.

A target that runs a chain's chainlets on several machines (the swarm target) serves each
internal chainlet over HTTPS with a certificate issued by a certificate authority of that
chain alone (:mod:`chains.targets.certificates` makes them), and has every stub verify its
callee against that authority only: a peer with a certificate of another chain, or of a
public authority, is refused before the chain's token is sent. The server reads three
variables, each naming a PEM file:

- ``CHAINS_TLS_CERT_FILE`` and ``CHAINS_TLS_KEY_FILE``: the chainlet's own certificate and
  key; with them it serves HTTPS only;
- ``CHAINS_TLS_CA_FILE``: the chain's authority, which the stubs of its dependencies trust
  (and nothing else) for ``https://`` URLs.

Only the standard library's :mod:`ssl` is needed here, so the chainlet images carry nothing
more. For example::

    tls = TlsSettings.from_env({"CHAINS_TLS_CA_FILE": "/run/secrets/ca.pem"})
    context = tls.client_context()  # what the stubs verify their callees with
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from chains.errors import ChainsUsageError

__all__ = ["CA_FILE_ENV", "CERT_FILE_ENV", "KEY_FILE_ENV", "TlsSettings", "client_context"]

CA_FILE_ENV = "CHAINS_TLS_CA_FILE"
CERT_FILE_ENV = "CHAINS_TLS_CERT_FILE"
KEY_FILE_ENV = "CHAINS_TLS_KEY_FILE"


def _readable(variable: str, path: Path) -> Path:
    try:
        with open(path, "rb") as handle:
            handle.read(1)
    except OSError as exc:
        raise ChainsUsageError(
            f"{variable}={str(path)!r} cannot be read ({exc.strerror or exc}): it must name a PEM file "
            "this process can read"
        ) from None
    return path


def client_context(ca_file: Path, given_as: str = CA_FILE_ENV) -> ssl.SSLContext:
    """An SSL context that trusts the certificates ``ca_file`` holds, and no others.

    Hostnames are checked: a callee must present a certificate naming the host of the URL
    called. TLS 1.2 at least. ``given_as`` names where the file came from (a variable, an
    option) in the error a file that cannot be read, or holds no certificate, is refused with::

        context = client_context(Path("ca.pem"), given_as="--ca-file")
    """
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # verifies peers and hostnames
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_verify_locations(cafile=str(ca_file))
    except ssl.SSLError as exc:
        raise ChainsUsageError(
            f"{given_as}={str(ca_file)!r} holds no certificate authority this process can load "
            f"({exc.reason or exc}): it must name a PEM file with the CA certificate "
            "(-----BEGIN CERTIFICATE-----)"
        ) from None
    except OSError as exc:
        raise ChainsUsageError(
            f"{given_as}={str(ca_file)!r} cannot be read ({exc.strerror or exc}): it must name a PEM "
            "file with the CA certificate that this process can read"
        ) from None
    return context


@dataclass(frozen=True)
class TlsSettings:
    """Which PEM files a chainlet server serves and verifies TLS with; all optional."""

    ca_file: Path | None = None  # trusted for dependencies' https:// URLs
    cert_file: Path | None = None  # served, with key_file
    key_file: Path | None = None

    @property
    def serves_tls(self) -> bool:
        return self.cert_file is not None

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> TlsSettings:
        """The three ``CHAINS_TLS_*_FILE`` variables; a certificate without its key, or a file
        that cannot be read, is refused naming the variable."""
        paths = {
            name: Path(env[name]) if env.get(name) else None
            for name in (CA_FILE_ENV, CERT_FILE_ENV, KEY_FILE_ENV)
        }
        cert, key = paths[CERT_FILE_ENV], paths[KEY_FILE_ENV]
        if (cert is None) != (key is None):
            given, missing = (
                (CERT_FILE_ENV, KEY_FILE_ENV) if cert is not None else (KEY_FILE_ENV, CERT_FILE_ENV)
            )
            raise ChainsUsageError(
                f"{given} is set and {missing} is not: a chainlet serves TLS with both its certificate "
                "and its key, or with neither"
            )
        for name, path in paths.items():
            if path is not None:
                _readable(name, path)
        return cls(paths[CA_FILE_ENV], cert, key)

    def client_context(self) -> ssl.SSLContext | None:
        """What the stubs verify their callees with: the chain's CA only; None without one
        (the system's authorities, as any HTTPS client)."""
        return None if self.ca_file is None else client_context(self.ca_file)
