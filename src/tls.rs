//! TLS set-up shared by the stores that speak it.

/// rustls needs one process-wide crypto provider; install ring's once.
pub fn install_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}
