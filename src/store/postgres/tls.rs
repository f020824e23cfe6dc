//! TLS for a PostgreSQL connection, through rustls (ring): the connector each `sslmode` asks
//! for. `prefer` and `require` without a root certificate encrypt without checking who answers
//! (as libpq does); `verify-ca` checks the chain against `sslrootcert`; `verify-full` also that
//! the certificate names the host.

use super::url::{SslMode, Target};
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{
    CertificateError, ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme,
};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

/// The connector for `target`'s `sslmode`; `None` for `disable`.
pub fn connector(target: &Target) -> Result<Option<MakeRustlsConnect>, String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS: {e}"))?;
    let roots = match &target.root_cert {
        Some(path) => Some(roots(path)?),
        None => None,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match (target.ssl, roots) {
        (SslMode::Disable, _) => return Ok(None),
        (SslMode::Prefer | SslMode::Require, None) => Arc::new(Unchecked(provider)),
        (SslMode::Prefer | SslMode::Require | SslMode::VerifyCa, Some((store, certs))) => {
            Arc::new(Pinned {
                chain: Arc::new(AnyName(webpki(Arc::new(store), &provider)?)),
                certs,
                check_name: false,
            })
        }
        (SslMode::VerifyFull, Some((store, certs))) => Arc::new(Pinned {
            chain: webpki(Arc::new(store), &provider)?,
            certs,
            check_name: true,
        }),
        (SslMode::VerifyCa | SslMode::VerifyFull, None) => {
            return Err("no root certificate to verify the server with (sslrootcert=FILE)".into())
        }
    };
    let config = builder
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(Some(MakeRustlsConnect::new(config)))
}

/// The certificates of `sslrootcert`, as a root store and as given; the file is read through
/// the bounded reader (`/dev/zero` is refused after [`crate::lines::MAX_SMALL_FILE`] bytes).
fn roots(path: &std::path::Path) -> Result<(RootCertStore, Vec<CertificateDer<'static>>), String> {
    let at = |e: &dyn std::fmt::Display| format!("sslrootcert {}: {e}", path.display());
    let limit = crate::lines::MAX_SMALL_FILE;
    let bytes = std::fs::File::open(path)
        .map_err(|error| crate::lines::ReadError { line: None, error })
        .and_then(|f| crate::lines::read_bounded(&mut std::io::BufReader::new(f), u64::MAX, limit))
        .map_err(|e| at(&e))?;
    let mut store = RootCertStore::empty();
    let mut certs = Vec::new();
    for cert in CertificateDer::pem_slice_iter(&bytes) {
        let cert = cert.map_err(|e| at(&e))?;
        certs.push(cert.clone());
        store.add(cert).map_err(|e| at(&e))?;
    }
    if store.is_empty() {
        return Err(at(&"no PEM certificate in it"));
    }
    Ok((store, certs))
}

/// `verify-ca`/`verify-full` over the roots, and one thing more, as libpq (OpenSSL) does: a
/// server certificate that is itself one of the `sslrootcert` certificates — a self-signed
/// certificate given as its own root, libpq's usual set-up — is trusted as given, where
/// webpki alone refuses a CA certificate presented by the server (`CaUsedAsEndEntity`). Its
/// name is still checked under `verify-full`.
#[derive(Debug)]
struct Pinned {
    chain: Arc<dyn ServerCertVerifier>,
    certs: Vec<CertificateDer<'static>>,
    check_name: bool,
}

impl ServerCertVerifier for Pinned {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        if !self.certs.iter().any(|c| c.as_ref() == end_entity.as_ref()) {
            return self.chain.verify_server_cert(
                end_entity,
                intermediates,
                server_name,
                ocsp,
                now,
            );
        }
        if self.check_name {
            let cert = webpki::EndEntityCert::try_from(end_entity)
                .map_err(|_| rustls::Error::InvalidCertificate(CertificateError::BadEncoding))?;
            cert.verify_is_valid_for_subject_name(server_name)
                .map_err(|_| {
                    rustls::Error::InvalidCertificate(CertificateError::NotValidForName)
                })?;
        }
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.chain.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.chain.supported_verify_schemes()
    }
}

fn webpki(
    roots: Arc<RootCertStore>,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    WebPkiServerVerifier::builder_with_provider(roots, provider.clone())
        .build()
        .map_err(|e| format!("TLS: {e}"))
}

/// `prefer`/`require` without a root certificate: encrypted, the peer unchecked (the
/// handshake's signatures still are, so the key is the certificate's).
#[derive(Debug)]
struct Unchecked(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for Unchecked {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-ca`: the chain checked against the roots, whatever name the certificate gives.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}
