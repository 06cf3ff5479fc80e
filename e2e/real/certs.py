"""A private PKI for one control plane, made in-process with `cryptography`.

kube-apiserver authenticates clients by certificate (O=system:masters is the
admin group; CN names the user, as kube-controller-manager's
`system:kube-controller-manager`), serves TLS with a certificate whose SANs
cover how it is reached (127.0.0.1, the service IP, kubernetes.default.svc),
and signs ServiceAccount tokens with an RSA key pair. ECDSA P-256 keys for TLS
take microseconds to make, an RSA key tens of milliseconds: only the
service-account key is RSA. The CA key stays in memory, so more client
identities (a node agent, a user for RBAC tests) can be issued later.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

SERVICE_IP = "10.0.0.1"
SERVER_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
VALIDITY = dt.timedelta(days=7)


@dataclass(frozen=True)
class KeyPair:
    """Paths of a PEM certificate and its private key."""

    cert: Path
    key: Path


class CertificateAuthority:
    """A throw-away CA that writes certificates and keys as PEM files into `directory`."""

    def __init__(self, directory: Path, *, name: str = "longrun-envtest-ca") -> None:
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        self.directory = directory
        self._key = _ec_key()
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
        builder = _builder(subject, subject, self._key.public_key())
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
        builder = builder.add_extension(_usage(cert_sign=True), critical=True)
        self._cert = _sign(builder, self._key)
        self.cert_path = directory / "ca.crt"
        self.cert_path.write_bytes(_pem_cert(self._cert))

    def issue_server(self, stem: str, *, ips: tuple[str, ...], names: tuple[str, ...]) -> KeyPair:
        """A serving certificate for the given IP and DNS subject alternative names."""
        from cryptography import x509
        from cryptography.x509.oid import ExtendedKeyUsageOID

        alt: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
        alt += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        extensions = [
            x509.SubjectAlternativeName(alt),
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]),
        ]
        return self._issue(stem, common_name=names[0], organizations=(), extensions=extensions)

    def issue_kubelet(self, node_name: str, *, hostname: str) -> KeyPair:
        """A kubelet's serving certificate: the node's address 127.0.0.1, its name and host."""
        names = tuple(dict.fromkeys((node_name, hostname, "localhost")))
        return self.issue_server(f"kubelet-{node_name}", ips=("127.0.0.1",), names=names)

    def issue_kubelet_client(self) -> KeyPair:
        """Who kube-apiserver is to kubelets (`--kubelet-client-certificate`), as kubeadm
        issues it: `apiserver-kubelet-client.crt`, user kube-apiserver-kubelet-client."""
        return self.issue_client(
            "apiserver-kubelet-client",
            common_name="kube-apiserver-kubelet-client",
            organizations=("system:masters",),
        )

    def issue_client(
        self, stem: str, *, common_name: str, organizations: tuple[str, ...] = ()
    ) -> KeyPair:
        """A client certificate: the API server sees user `common_name` in `organizations`."""
        from cryptography import x509
        from cryptography.x509.oid import ExtendedKeyUsageOID

        extensions = [x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH])]
        return self._issue(
            stem, common_name=common_name, organizations=organizations, extensions=extensions
        )

    def _issue(
        self,
        stem: str,
        *,
        common_name: str,
        organizations: tuple[str, ...],
        extensions: list[Any],
    ) -> KeyPair:
        from cryptography import x509
        from cryptography.x509.oid import NameOID

        key = _ec_key()
        attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        builder = _builder(x509.Name(attrs), self._cert.subject, key.public_key())
        builder = builder.add_extension(x509.BasicConstraints(ca=False, path_length=None), True)
        builder = builder.add_extension(_usage(cert_sign=False), critical=True)
        for extension in extensions:
            builder = builder.add_extension(extension, critical=False)
        pair = KeyPair(self.directory / f"{stem}.crt", self.directory / f"{stem}.key")
        pair.cert.write_bytes(_pem_cert(_sign(builder, self._key)))
        _write_private(pair.key, key)
        return pair


@dataclass(frozen=True)
class KubeletPKI:
    """What pods/log needs between an API server and one node agent: the CA both trust, the
    agent's serving certificate, and the API server's kubelet client certificate."""

    ca: Path
    serving: KeyPair
    client: KeyPair


def kubelet_pki(directory: Path, *, hostname: str, node_name: str = "node") -> KubeletPKI:
    """A fresh CA and both certificates, for an API server without a PKI of its own (the
    emulator: `EmulatorConfig.kubelet_client`); a ControlPlane issues them from its own CA.
    The API server reaches the agent at its InternalIP (127.0.0.1), which is what it
    checks; the node's name in the certificate is only informative."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = CertificateAuthority(directory, name="longrun-kubelet-ca")
    serving = ca.issue_kubelet(node_name, hostname=hostname)
    return KubeletPKI(ca.cert_path, serving, ca.issue_kubelet_client())


def write_service_account_keys(directory: Path) -> KeyPair:
    """The RSA pair that signs ServiceAccount tokens: `sa.key` (private), `sa.pub` (public)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    pair.cert.write_bytes(public)
    _write_private(pair.key, key)
    return pair


def _ec_key() -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec

    return ec.generate_private_key(ec.SECP256R1())


def _builder(subject: Any, issuer: Any, public_key: Any) -> Any:
    from cryptography import x509

    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))  # tolerate small clock skews
        .not_valid_after(now + VALIDITY)
    )


def _usage(*, cert_sign: bool) -> Any:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=False,  # ECDSA keys sign; they never encipher
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _sign(builder: Any, key: Any) -> Any:
    from cryptography.hazmat.primitives import hashes

    return builder.sign(key, hashes.SHA256())


def _pem_cert(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def _write_private(path: Path, key: Any) -> None:
    from cryptography.hazmat.primitives import serialization

    pem = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    path.touch(mode=0o600)
    path.write_bytes(pem)
