"""The webhook certificate Kueue serves on 127.0.0.1, made in-process with `cryptography`.

Kueue's certificate rotator (open-policy-agent/cert-controller) keeps the webhook's CA and
serving certificate in the Secret `kueue-webhook-server-cert` and regenerates them unless
they are valid 90 days ahead: a CA valid for the DNS name `kueue-ca`, and a serving
certificate valid for `kueue-webhook-service.kueue-system.svc`. The pair made here passes
those checks and also covers IP 127.0.0.1, where the API server reaches the webhook through
a `url` clientConfig: pre-created, the Secret is kept as it is. The same files are written
into the webhook server's certificate directory, which a kubelet would fill from the Secret.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from typing import Any

CA_NAME = "kueue-ca"  # Kueue's pkg/util/cert caName
VALIDITY = dt.timedelta(days=365)  # beyond the rotator's 90-day look-ahead


@dataclass(frozen=True)
class WebhookPKI:
    """PEM bytes of the CA and of the webhook's serving certificate and key."""

    ca_cert: bytes
    ca_key: bytes
    cert: bytes
    key: bytes

    def secret_data(self) -> dict[str, bytes]:
        """The Secret's data, under the rotator's keys."""
        return {"ca.crt": self.ca_cert, "ca.key": self.ca_key,
                "tls.crt": self.cert, "tls.key": self.key}  # fmt: skip


def webhook_pki(service_dns: str) -> WebhookPKI:
    """A CA and a serving certificate for `service_dns` and IP 127.0.0.1, signed by it."""
    from cryptography import x509
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    ca_key, key = _rsa_key(), _rsa_key()
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, CA_NAME)])
    ca = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectAlternativeName([x509.DNSName(CA_NAME)]), critical=False)
    )
    ca_cert = _sign(ca, ca_key)
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, service_dns)])
    alt = [x509.DNSName(service_dns), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    server = (
        _builder(subject, ca_name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_usage(cert_sign=False), critical=True)
        .add_extension(x509.SubjectAlternativeName(alt), critical=False)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    )
    return WebhookPKI(_pem(ca_cert), _pem_key(ca_key), _pem(_sign(server, ca_key)), _pem_key(key))


def _rsa_key() -> Any:
    # RSA, as the rotator makes its own: its CA check parses the key pair with tls.X509KeyPair.
    from cryptography.hazmat.primitives.asymmetric import rsa

    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _builder(subject: Any, issuer: Any, public_key: Any) -> Any:
    from cryptography import x509

    now = dt.datetime.now(dt.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(hours=1))
        .not_valid_after(now + VALIDITY)
    )


def _usage(*, cert_sign: bool) -> Any:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=True,
        content_commitment=False,
        key_encipherment=not cert_sign,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=False,
        encipher_only=False,
        decipher_only=False,
    )


def _sign(builder: Any, key: Any) -> Any:
    from cryptography.hazmat.primitives import hashes

    return builder.sign(key, hashes.SHA256())


def _pem(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(cert.public_bytes(serialization.Encoding.PEM))


def _pem_key(key: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.TraditionalOpenSSL,
            serialization.NoEncryption(),
        )
    )
