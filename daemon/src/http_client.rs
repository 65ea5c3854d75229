//! The outgoing HTTP client (the CLI, `http` handlers): reqwest over rustls
//! with the ring crypto provider.

use std::sync::Once;

/// A reqwest client builder with TLS ready to use.
pub fn builder() -> reqwest::ClientBuilder {
    static PROVIDER: Once = Once::new();
    PROVIDER.call_once(|| {
        // Fails only if another provider was installed first; that one is
        // then used, which is fine.
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
    reqwest::Client::builder()
}
