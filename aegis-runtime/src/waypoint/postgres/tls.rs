//! TLS for PostgreSQL connections, through rustls (on ring).
//!
//! `sslmode` is read from the connection string the way libpq reads it:
//! `disable` (plain TCP), `prefer` / `require` (encrypted, the certificate
//! not checked), `verify-ca` (the chain must lead to a trusted root) and
//! `verify-full` (the chain and the host name). The trusted roots are the
//! Mozilla set bundled by `webpki-roots`. tokio-postgres itself only knows
//! `disable`, `prefer` and `require`, so the two verifying modes are
//! rewritten to `require` before it parses the string and the check is made
//! here.

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

use crate::error::StoreError;

/// How much of the server's certificate is checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verify {
    /// Nothing (`sslmode=prefer` / `require`, as in libpq).
    None,
    /// The chain, not the host name (`verify-ca`).
    Chain,
    /// The chain and the host name (`verify-full`).
    Full,
}

/// `connection` with `sslmode=verify-ca` / `verify-full` rewritten to
/// `require`, and the verification those modes asked for.
pub(crate) fn split_sslmode(connection: &str) -> (String, Verify) {
    for (mode, verify) in [
        ("sslmode=verify-full", Verify::Full),
        ("sslmode=verify-ca", Verify::Chain),
    ] {
        if connection.contains(mode) {
            return (connection.replace(mode, "sslmode=require"), verify);
        }
    }
    (connection.to_string(), Verify::None)
}

/// The connector for `verify`; used only when `sslmode` asks for TLS.
pub(crate) fn connector(verify: Verify) -> Result<MakeRustlsConnect, StoreError> {
    let tls_error =
        |e: rustls::Error| StoreError::Backend(format!("postgres: TLS setup failed: {e}"));
    // rustls 0.23.48 deprecates the ring provider for lacking post-quantum
    // key exchange, which only its aws-lc-rs provider offers, at the price
    // of a C (and CMake) build. aegis stays on ring, as the HTTP adapters
    // do: its X25519, P-256 and P-384 are what PostgreSQL servers negotiate.
    #[allow(deprecated)]
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let roots = Arc::new(RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    });
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(tls_error)?;
    let config = match verify {
        Verify::Full => builder.with_root_certificates(roots).with_no_client_auth(),
        Verify::Chain | Verify::None => {
            let chain = match verify {
                Verify::Chain => Some(
                    rustls::client::WebPkiServerVerifier::builder_with_provider(
                        roots,
                        provider.clone(),
                    )
                    .build()
                    .map_err(|e| StoreError::Backend(format!("postgres: TLS setup failed: {e}")))?,
                ),
                _ => None,
            };
            builder
                .dangerous()
                .with_custom_certificate_verifier(Arc::new(Lenient { chain, provider }))
                .with_no_client_auth()
        }
    };
    Ok(MakeRustlsConnect::new(config))
}

/// `require` / `verify-ca`: the handshake's signatures are checked (so the
/// session is encrypted to whoever holds the certificate's key), the
/// certificate chain only for `verify-ca` and never the host name.
#[derive(Debug)]
struct Lenient {
    chain: Option<Arc<rustls::client::WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let Some(chain) = &self.chain else {
            return Ok(ServerCertVerified::assertion());
        };
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now) {
            Ok(v) => Ok(v),
            Err(rustls::Error::InvalidCertificate(rustls::CertificateError::NotValidForName))
            | Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            Err(e) => Err(e),
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verifying_modes_become_require_and_keep_their_check() {
        let (s, v) = split_sslmode("postgresql://u@db/app?sslmode=verify-full");
        assert_eq!(s, "postgresql://u@db/app?sslmode=require");
        assert_eq!(v, Verify::Full);
        let (s, v) = split_sslmode("host=db sslmode=verify-ca");
        assert_eq!(s, "host=db sslmode=require");
        assert_eq!(v, Verify::Chain);
        let (s, v) = split_sslmode("host=db sslmode=require");
        assert_eq!(s, "host=db sslmode=require");
        assert_eq!(v, Verify::None);
    }

    #[test]
    fn a_connector_builds_for_every_mode() {
        for v in [Verify::None, Verify::Chain, Verify::Full] {
            assert!(connector(v).is_ok());
        }
    }
}
