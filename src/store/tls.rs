//! TLS set-up shared by the stores that speak it.

use std::sync::OnceLock;

use rustls::pki_types::TrustAnchor;

use crate::store::server::ServerUrl;
use crate::store::{StoreError, StoreResult};

/// rustls needs one process-wide crypto provider; install ring's once.
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The files a URL's `?ca_file=`, `?cert_file=` and `?key_file=` name, read.
pub struct Files {
    /// The CA to trust instead of the system's roots.
    pub ca: Option<Vec<u8>>,
    /// A client certificate and its key.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
}

/// Take the TLS parameters out of `url` and read their files; `None` for a URL without TLS.
/// `tls_url` names the URL that takes them, for the message ("a rediss:// URL").
pub fn take_files(url: &mut ServerUrl, tls_url: &str) -> StoreResult<Option<Files>> {
    let ca = url.take_param("ca_file");
    let cert = url.take_param("cert_file");
    let key = url.take_param("key_file");
    if !url.tls {
        if ca.is_some() || cert.is_some() || key.is_some() {
            return Err(StoreError::invalid(format!(
                "ca_file, cert_file and key_file need {tls_url}"
            )));
        }
        return Ok(None);
    }
    if cert.is_some() != key.is_some() {
        return Err(StoreError::invalid("cert_file and key_file go together"));
    }
    install_provider();
    let read = |p: &str| {
        std::fs::read(p).map_err(|e| StoreError::invalid(format!("cannot read {p}: {e}")))
    };
    let identity = match (cert, key) {
        (Some(c), Some(k)) => Some((read(&c)?, read(&k)?)),
        _ => None,
    };
    Ok(Some(Files {
        ca: ca.as_deref().map(read).transpose()?,
        identity,
    }))
}

/// The system's trusted roots, for a TLS URL that names no `ca_file`: read from the system
/// store (2 to 3.5 ms) on the first call only, however many endpoints ask.
pub fn system_roots() -> StoreResult<Vec<TrustAnchor<'static>>> {
    static ROOTS: OnceLock<Vec<TrustAnchor<'static>>> = OnceLock::new();
    let roots = ROOTS.get_or_init(|| {
        let mut store = rustls::RootCertStore::empty();
        store.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
        store.roots
    });
    if roots.is_empty() {
        return Err(StoreError::invalid(
            "no trusted CA certificates found in the system's store; name one with ?ca_file=",
        ));
    }
    Ok(roots.clone())
}
