"""A certificate authority per chain, and the server certificates it issues to the chain's chainlets.

Targets that spread a chain over several machines serve its internal chainlets over HTTPS
(:mod:`chains.tls`): the pushing machine makes the chain an authority of its own, the first
time the chain is pushed, in its state folder (``$CHAINS_HOME/<chain>/tls/``): ``ca.pem``, the
certificate every chainlet trusts, and ``ca-key.pem``, readable by its owner only, which
never leaves that folder. Each push issues every chainlet a fresh certificate naming the
hosts it is reached by; chainlets of one chain trust each other and nothing else, so a
certificate of another chain (another authority) is refused. The authority is kept across
pushes so that, during a rolling update, old and new tasks trust each other.

Needs the ``cryptography`` package (``pip install 'chains-sdk[docker]'``, or ``[ray]``)::

    authority = ChainAuthority.load_or_create("hello")
    issued = authority.issue(["hello-words", "localhost"])
    Path("words.pem").write_bytes(issued.cert_pem)

The same kind of authority serves a Ray cluster's own TLS (Ray's gRPC between its processes,
which carries the chain's token between nodes on the ray target): :func:`write_node_certificates`
writes a cluster authority and a node's certificate, and gives the ``RAY_TLS_*`` variables
every Ray process of that node is started with. From a shell, on the machine that keeps the
authority::

    python -m chains.targets.certificates ray-node DIR 10.0.0.5 head-1   # DIR/10.0.0.5.pem ...
"""

from __future__ import annotations

import datetime
import ipaddress
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from chains.errors import ChainsUsageError
from chains.targets.state import chain_dir, write_private

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

__all__ = [
    "CA_VALIDITY_DAYS",
    "CERT_VALIDITY_DAYS",
    "LOOPBACK_NAMES",
    "ChainAuthority",
    "IssuedCertificate",
    "write_node_certificates",
]

CA_VALIDITY_DAYS = 3650
# A chain that runs longer than this without a push loses its internal calls: long, since a
# re-push is the only renewal, and the authority, not the certificate's age, bounds the trust.
CERT_VALIDITY_DAYS = 1825
# Besides a chainlet's service names, what its own health check (and a debugging shell in its
# container) reaches it by.
LOOPBACK_NAMES = ("localhost", "127.0.0.1")
_BACKDATE = datetime.timedelta(minutes=5)  # clocks of the nodes a little behind the pusher's


def _crypto() -> None:
    try:
        import cryptography  # noqa: F401
    except ImportError:
        raise ChainsUsageError(
            "TLS between chainlets needs the cryptography package, to make the chain's certificate "
            "authority: pip install 'chains-sdk[docker]' (or pip install cryptography)"
        ) from None


@dataclass(frozen=True)
class IssuedCertificate:
    """A chainlet's server certificate and private key, both PEM."""

    cert_pem: bytes
    key_pem: bytes = b""  # secret: travels only as the platform's secret


class ChainAuthority:
    """The certificate authority of one chain; see the module's docstring."""

    def __init__(self, chain: str, key: ec.EllipticCurvePrivateKey, certificate: x509.Certificate) -> None:
        self.chain = chain
        self._key = key
        self.certificate = certificate

    @property
    def cert_pem(self) -> bytes:
        """The authority's certificate: what every chainlet trusts (public)."""
        from cryptography.hazmat.primitives.serialization import Encoding

        return self.certificate.public_bytes(Encoding.PEM)

    @classmethod
    def folder_of(cls, chain: str) -> Path:
        return chain_dir(chain) / "tls"

    @classmethod
    def create(cls, chain: str) -> ChainAuthority:
        """A new authority for ``chain``, in memory only (:meth:`save` keeps it)."""
        _crypto()
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.x509.oid import NameOID

        key = ec.generate_private_key(ec.SECP256R1())
        name = x509.Name(
            [
                x509.NameAttribute(NameOID.ORGANIZATION_NAME, "chains"),
                x509.NameAttribute(NameOID.COMMON_NAME, f"chain {chain} CA"[:64]),
            ]
        )
        now = datetime.datetime.now(datetime.UTC)
        public = key.public_key()
        certificate = (
            x509.CertificateBuilder()
            .subject_name(name)
            .issuer_name(name)
            .public_key(public)
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(now + datetime.timedelta(days=CA_VALIDITY_DAYS))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=False,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(public), critical=False)
            .sign(key, hashes.SHA256())
        )
        return cls(chain, key, certificate)

    @classmethod
    def load_or_create(cls, chain: str, folder: Path | None = None) -> ChainAuthority:
        """The chain's authority from its state folder; made and saved there the first time."""
        folder = folder or cls.folder_of(chain)
        cert_path, key_path = folder / "ca.pem", folder / "ca-key.pem"
        if not cert_path.exists() and not key_path.exists():
            authority = cls.create(chain)
            authority.save(folder)
            return authority
        _crypto()
        from cryptography import x509
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import load_pem_private_key

        try:
            certificate = x509.load_pem_x509_certificate(cert_path.read_bytes())
            key = load_pem_private_key(key_path.read_bytes(), password=None)
        except (OSError, ValueError) as exc:
            raise ChainsUsageError(
                f"the certificate authority of chain {chain!r} in {folder} cannot be read ({exc}); "
                f"remove that folder to make a new one (running chainlets then keep the old one until "
                "they are pushed again)"
            ) from None
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ChainsUsageError(f"{key_path} is not the elliptic-curve key chains makes; remove {folder}")
        return cls(chain, key, certificate)

    def save(self, folder: Path) -> None:
        """``ca.pem`` and ``ca-key.pem`` (0600, as its folder is 0700) into ``folder``."""
        from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat

        folder.mkdir(parents=True, exist_ok=True)
        os.chmod(folder, 0o700)
        key = self._key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption())
        write_private(folder / "ca-key.pem", key.decode())
        write_private(folder / "ca.pem", self.cert_pem.decode())

    def issue(
        self, names: Sequence[str], days: int = CERT_VALIDITY_DAYS, *, client: bool = False
    ) -> IssuedCertificate:
        """A server certificate for the hosts ``names`` (DNS names or IP addresses); with
        ``client``, good for the client's side of mutual TLS as well (as Ray's processes use
        one certificate both ways)."""
        from cryptography import x509
        from cryptography.hazmat.primitives import hashes
        from cryptography.hazmat.primitives.asymmetric import ec
        from cryptography.hazmat.primitives.serialization import (
            Encoding,
            NoEncryption,
            PrivateFormat,
        )
        from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

        if not names:
            raise ValueError("a certificate names at least one host")
        alternatives: list[x509.GeneralName] = []
        for name in dict.fromkeys(names):
            try:
                alternatives.append(x509.IPAddress(ipaddress.ip_address(name)))
            except ValueError:
                alternatives.append(x509.DNSName(name))
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        authority_key = x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key())
        certificate = (
            x509.CertificateBuilder()
            .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, names[0][:64])]))
            .issuer_name(self.certificate.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - _BACKDATE)
            .not_valid_after(min(now + datetime.timedelta(days=days), self.certificate.not_valid_after_utc))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.SubjectAlternativeName(alternatives), critical=False)
            .add_extension(
                x509.ExtendedKeyUsage(
                    [ExtendedKeyUsageOID.SERVER_AUTH] + ([ExtendedKeyUsageOID.CLIENT_AUTH] if client else [])
                ),
                critical=False,
            )
            .add_extension(authority_key, critical=False)
            .sign(self._key, hashes.SHA256())
        )
        return IssuedCertificate(
            certificate.public_bytes(Encoding.PEM),
            key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()),
        )


def write_node_certificates(folder: Path, names: Sequence[str], label: str = "node") -> dict[str, str]:
    """Ray's TLS for one node: the cluster's authority in ``folder`` (made the first time,
    reused after, so that every node's certificate is issued by the same one), and a
    certificate for the node's ``names`` (its node IP address, host names), written as
    ``<label>.pem`` and ``<label>-key.pem`` (0600) beside ``ca.pem``. Returns the variables
    that every Ray process of that node (``ray start``, and each driver or client) needs::

        env = write_node_certificates(Path("ray-tls"), ["10.0.0.5", "head-1"])
        subprocess.run(["ray", "start", "--head"], env={**os.environ, **env})

    One certificate serves both ends of Ray's mutual TLS, so it is issued for clients too;
    ``localhost`` and ``127.0.0.1`` are added to ``names`` (Ray's processes of one node reach
    each other there). Copy ``ca.pem`` and the node's two files to that node only; ``ca-key.pem``
    stays where it was made.
    """
    if not names:
        raise ChainsUsageError("name the node's addresses (its node IP first), e.g. 10.0.0.5 head-1")
    authority = ChainAuthority.load_or_create("ray cluster", folder)
    issued = authority.issue([*names, *LOOPBACK_NAMES], client=True)
    cert, key = folder / f"{label}.pem", folder / f"{label}-key.pem"
    cert.write_bytes(issued.cert_pem)
    write_private(key, issued.key_pem.decode())
    return {
        "RAY_USE_TLS": "1",
        "RAY_TLS_SERVER_CERT": str(cert.absolute()),
        "RAY_TLS_SERVER_KEY": str(key.absolute()),
        "RAY_TLS_CA_CERT": str((folder / "ca.pem").absolute()),
    }


def main(argv: Sequence[str]) -> int:
    """``python -m chains.targets.certificates ray-node DIR NODE_IP [NAME...]``: the node's files
    are named after its address, so that one folder holds the authority and every node's."""
    if len(argv) < 3 or argv[0] != "ray-node":
        print(
            "usage: python -m chains.targets.certificates ray-node DIR NODE_IP [NAME...]\n"
            "writes DIR/ca.pem (and ca-key.pem, kept there: one authority for every node) and "
            "DIR/NODE_IP.pem, DIR/NODE_IP-key.pem for a Ray node, and prints the RAY_* variables "
            "to start its Ray processes with",
            file=sys.stderr,
        )
        return 2
    try:
        env = write_node_certificates(Path(argv[1]), argv[2:], label=argv[2])
    except ChainsUsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    for name, value in env.items():
        print(f"export {name}={value}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
