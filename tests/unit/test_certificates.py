"""A chain's certificate authority and the certificates it issues: a chainlet's certificate is
trusted by its own chain's CA only, for the names it was issued for; the CA's key stays private.

The handshakes here are real TLS handshakes between two in-memory SSL objects: the client
context is the one chainlet servers give their stubs (:func:`chains.tls.client_context`)."""

from __future__ import annotations

import ssl
import stat
from pathlib import Path

import pytest

from chains.errors import ChainsUsageError
from chains.targets.certificates import ChainAuthority, IssuedCertificate, main, write_node_certificates
from chains.tls import TlsSettings, client_context


def _files(folder: Path, issued: IssuedCertificate) -> tuple[Path, Path]:
    cert, key = folder / "cert.pem", folder / "key.pem"
    cert.write_bytes(issued.cert_pem)
    key.write_bytes(issued.key_pem)
    return cert, key


def _handshake(client: ssl.SSLContext, server: ssl.SSLContext, hostname: str) -> None:
    """A full TLS handshake between ``client`` (checking ``hostname``) and ``server``."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    server_in, server_out = ssl.MemoryBIO(), ssl.MemoryBIO()
    near = client.wrap_bio(to_client, to_server, server_hostname=hostname)
    far = server.wrap_bio(server_in, server_out, server_side=True)
    done = {"near": False, "far": False}
    for _ in range(20):
        for name, end in (("near", near), ("far", far)):
            if not done[name]:
                try:
                    end.do_handshake()
                    done[name] = True
                except ssl.SSLWantReadError:
                    pass
        server_in.write(to_server.read())
        to_client.write(server_out.read())
        if all(done.values()):
            return
    raise AssertionError("the handshake did not finish")


def _server(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    return context


@pytest.fixture
def two_chains(tmp_path: Path) -> tuple[ChainAuthority, ChainAuthority]:
    return (
        ChainAuthority.load_or_create("one", tmp_path / "one"),
        ChainAuthority.load_or_create("two", tmp_path / "two"),
    )


def test_a_certificate_verifies_against_its_chains_ca_and_not_another_chains(
    tmp_path: Path, two_chains: tuple[ChainAuthority, ChainAuthority]
) -> None:
    one, two = two_chains
    cert, key = _files(tmp_path, one.issue(["one-leaf", "localhost", "127.0.0.1"]))
    server = _server(cert, key)
    _handshake(client_context(tmp_path / "one" / "ca.pem"), server, "one-leaf")
    _handshake(client_context(tmp_path / "one" / "ca.pem"), server, "127.0.0.1")
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer certificate"):
        _handshake(client_context(tmp_path / "two" / "ca.pem"), server, "one-leaf")
    # Nor does the system's trust store know a chain's CA.
    with pytest.raises(ssl.SSLCertVerificationError):
        _handshake(ssl.create_default_context(), server, "one-leaf")
    assert two.cert_pem != one.cert_pem


def test_a_certificate_is_refused_for_a_name_it_was_not_issued_for(
    tmp_path: Path, two_chains: tuple[ChainAuthority, ChainAuthority]
) -> None:
    one, _ = two_chains
    cert, key = _files(tmp_path, one.issue(["one-leaf", "localhost"]))
    with pytest.raises(ssl.SSLCertVerificationError, match="Hostname mismatch"):
        _handshake(client_context(tmp_path / "one" / "ca.pem"), _server(cert, key), "one-mid")


def test_a_chainlet_certificate_cannot_sign_others(
    tmp_path: Path, two_chains: tuple[ChainAuthority, ChainAuthority]
) -> None:
    """A leaf's key, which every task of that chainlet holds, must not make certificates the
    chain trusts: the leaf is no CA."""
    from cryptography import x509

    one, _ = two_chains
    leaf = x509.load_pem_x509_certificate(one.issue(["one-leaf"]).cert_pem)
    assert leaf.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is False
    ca = one.certificate.extensions.get_extension_for_class(x509.BasicConstraints).value
    assert ca.ca is True and ca.path_length == 0
    leaf.verify_directly_issued_by(one.certificate)


def test_the_authority_is_kept_and_its_key_is_private(tmp_path: Path) -> None:
    folder = tmp_path / "state" / "tls"
    first = ChainAuthority.load_or_create("kept", folder)
    again = ChainAuthority.load_or_create("kept", folder)
    assert again.cert_pem == first.cert_pem  # old and new tasks of a rolling update trust each other
    assert stat.S_IMODE((folder / "ca-key.pem").stat().st_mode) == 0o600
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700
    assert b"PRIVATE KEY" in (folder / "ca-key.pem").read_bytes()
    assert b"PRIVATE KEY" not in (folder / "ca.pem").read_bytes()
    # A certificate issued after the reload verifies against the CA saved before it.
    cert, key = _files(tmp_path, again.issue(["kept-leaf"]))
    _handshake(client_context(folder / "ca.pem"), _server(cert, key), "kept-leaf")


def test_a_damaged_authority_is_refused_saying_what_to_do(tmp_path: Path) -> None:
    folder = tmp_path / "tls"
    ChainAuthority.load_or_create("broken", folder)
    (folder / "ca-key.pem").write_text("not a key")
    with pytest.raises(ChainsUsageError, match=r"cannot be read .* remove that folder"):
        ChainAuthority.load_or_create("broken", folder)


def test_tls_settings_refuse_half_a_pair_and_unreadable_files(tmp_path: Path) -> None:
    authority = ChainAuthority.load_or_create("s", tmp_path / "ca")
    cert, key = _files(tmp_path, authority.issue(["s-leaf"]))
    with pytest.raises(ChainsUsageError, match="CHAINS_TLS_CERT_FILE is set and CHAINS_TLS_KEY_FILE is not"):
        TlsSettings.from_env({"CHAINS_TLS_CERT_FILE": str(cert)})
    with pytest.raises(ChainsUsageError, match=r"CHAINS_TLS_CA_FILE=.*missing.pem.* cannot be read"):
        TlsSettings.from_env({"CHAINS_TLS_CA_FILE": str(tmp_path / "missing.pem")})
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a certificate")
    with pytest.raises(ChainsUsageError, match=r"CHAINS_TLS_CA_FILE=.* holds no certificate authority"):
        client_context(garbage)
    settings = TlsSettings.from_env(
        {
            "CHAINS_TLS_CERT_FILE": str(cert),
            "CHAINS_TLS_KEY_FILE": str(key),
            "CHAINS_TLS_CA_FILE": str(tmp_path / "ca" / "ca.pem"),
        }
    )
    assert settings.serves_tls and settings.client_context() is not None
    assert TlsSettings.from_env({}).client_context() is None and not TlsSettings.from_env({}).serves_tls


def _mutual(client_cert: Path, client_key: Path, server_cert: Path, server_key: Path, ca: Path) -> None:
    """A handshake in which each side proves itself to the other, as Ray's processes do."""
    client = client_context(ca)
    client.load_cert_chain(client_cert, client_key)
    server = _server(server_cert, server_key)
    server.verify_mode = ssl.CERT_REQUIRED
    server.load_verify_locations(ca)
    _handshake(client, server, "127.0.0.2")


def test_ray_nodes_certificates_share_the_clusters_authority_and_serve_both_ends(tmp_path: Path) -> None:
    folder = tmp_path / "ray-tls"
    head = write_node_certificates(folder, ["127.0.0.2", "head-1"], label="head")
    worker = write_node_certificates(folder, ["127.0.0.3"], label="worker")
    assert head["RAY_USE_TLS"] == "1" and head["RAY_TLS_CA_CERT"] == worker["RAY_TLS_CA_CERT"]
    assert head["RAY_TLS_SERVER_CERT"] == str((folder / "head.pem").absolute())
    assert stat.S_IMODE(Path(head["RAY_TLS_SERVER_KEY"]).stat().st_mode) == 0o600
    ca = Path(head["RAY_TLS_CA_CERT"])
    # The worker's certificate as a client of the head's, in mutual TLS.
    _mutual(
        Path(worker["RAY_TLS_SERVER_CERT"]),
        Path(worker["RAY_TLS_SERVER_KEY"]),
        Path(head["RAY_TLS_SERVER_CERT"]),
        Path(head["RAY_TLS_SERVER_KEY"]),
        ca,
    )
    # A chainlet's certificate (server only) is refused as a client's.
    authority = ChainAuthority.load_or_create("any", folder)
    server_only, server_only_key = _files(tmp_path, authority.issue(["127.0.0.3"]))
    with pytest.raises(ssl.SSLError, match="unsuitable certificate purpose"):
        _mutual(
            server_only,
            server_only_key,
            Path(head["RAY_TLS_SERVER_CERT"]),
            Path(head["RAY_TLS_SERVER_KEY"]),
            ca,
        )


def test_ray_node_certificates_from_the_command_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["ray-node", str(tmp_path / "tls"), "10.0.0.5", "head-1"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed == [
        "export RAY_USE_TLS=1",
        f"export RAY_TLS_SERVER_CERT={tmp_path / 'tls' / '10.0.0.5.pem'}",
        f"export RAY_TLS_SERVER_KEY={tmp_path / 'tls' / '10.0.0.5-key.pem'}",
        f"export RAY_TLS_CA_CERT={tmp_path / 'tls' / 'ca.pem'}",
    ]
    # A second node: its own files, the same authority.
    ca = (tmp_path / "tls" / "ca.pem").read_bytes()
    assert main(["ray-node", str(tmp_path / "tls"), "10.0.0.6"]) == 0
    assert (tmp_path / "tls" / "ca.pem").read_bytes() == ca and (tmp_path / "tls" / "10.0.0.6.pem").exists()
    capsys.readouterr()
    assert main(["ray-node", str(tmp_path / "tls")]) == 2
    assert "usage: python -m chains.targets.certificates ray-node DIR NODE_IP" in capsys.readouterr().err
    with pytest.raises(ChainsUsageError, match="name the node's addresses"):
        write_node_certificates(tmp_path / "tls", [])
