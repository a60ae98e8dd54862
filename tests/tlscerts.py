"""A throwaway PKI for TLS tests: a CA, a server certificate for 127.0.0.1 and
localhost, and client certificates by common name, written as PEM files."""

from __future__ import annotations

import datetime
import ipaddress
import ssl
from pathlib import Path

import attrs
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@attrs.frozen
class CertFiles:
    cert: Path
    key: Path


@attrs.define
class PKI:
    """``ca`` signs everything; ``issue(cn)`` makes client certificates."""

    directory: Path
    ca: CertFiles
    server: CertFiles
    _ca_cert: x509.Certificate
    _ca_key: ec.EllipticCurvePrivateKey

    def issue(self, cn: str, *, client: bool = True) -> CertFiles:
        return _write(self.directory, cn, *_signed(cn, self._ca_cert, self._ca_key, client=client))


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "amqplite tests"),
                      x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _builder(subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey
             ) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (x509.CertificateBuilder().subject_name(subject).issuer_name(issuer)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1)))


def _signed(cn: str, ca_cert: x509.Certificate, ca_key: ec.EllipticCurvePrivateKey, *,
            client: bool) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = ec.generate_private_key(ec.SECP256R1())
    usage = ExtendedKeyUsageOID.CLIENT_AUTH if client else ExtendedKeyUsageOID.SERVER_AUTH
    b = (_builder(_name(cn), ca_cert.subject, key)
         .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
         .add_extension(x509.ExtendedKeyUsage([usage]), critical=False))
    if not client:
        b = b.add_extension(x509.SubjectAlternativeName([
            x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False)
    return b.sign(ca_key, hashes.SHA256()), key


def _write(directory: Path, stem: str, cert: x509.Certificate,
           key: ec.EllipticCurvePrivateKey) -> CertFiles:
    files = CertFiles(directory / f"{stem}.crt", directory / f"{stem}.key")
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.write_bytes(key.private_bytes(serialization.Encoding.PEM,
                                            serialization.PrivateFormat.PKCS8,
                                            serialization.NoEncryption()))
    return files


def make_pki(directory: Path, name: str = "test-ca") -> PKI:
    """A new CA (``name``) and a server certificate it signed, under ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_cert = (_builder(_name(name), _name(name), ca_key)
               .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
               .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True,
                                            crl_sign=True, content_commitment=False,
                                            key_encipherment=False, data_encipherment=False,
                                            key_agreement=False, encipher_only=False,
                                            decipher_only=False), critical=True)
               .sign(ca_key, hashes.SHA256()))
    ca = _write(directory, name, ca_cert, ca_key)
    server = _write(directory, f"{name}-server",
                    *_signed("localhost", ca_cert, ca_key, client=False))
    return PKI(directory, ca, server, ca_cert, ca_key)


def client_context(pki: PKI, client: CertFiles | None = None) -> ssl.SSLContext:
    """A client's context trusting ``pki``'s CA, presenting ``client``'s certificate."""
    ctx = ssl.create_default_context(cafile=str(pki.ca.cert))
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    return ctx
