//! The PostgreSQL connection's background half: it carries every reply, and hands each
//! NOTIFY to the waiter listening on that channel. Also the TLS connector.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures_util::StreamExt;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::Notify;
use tokio_postgres::{AsyncMessage, Connection};

use crate::store::{Listener, StoreError, StoreResult};

/// Waiters of this process by channel. A notification that arrives before its waiter waits
/// is kept (as `Notify`'s one permit), so a release between two looks is never lost.
///
/// Beside them, the channels the server said this session listens on, asked after each
/// LISTEN (`Postgres::session_listens`). Behind a pooler that is empty, and a waiter far
/// back in line looks as often as any other (`record::rules::Far`): it would hear no
/// wake-up.
#[derive(Default)]
pub struct Wakeups(Mutex<HashMap<String, Arc<Notify>>>, Mutex<HashSet<String>>);

impl Wakeups {
    /// A listener on `channel`. A waiter listens again while its old listener still lives
    /// (the engine opens the new one first, after its store came back): both share one
    /// `Notify`, so a permit the old one holds carries over, and the channel stays
    /// registered until the last of them is dropped.
    pub fn register(self: &Arc<Self>, channel: &str) -> Wakeup {
        let notify = self
            .0
            .lock()
            .unwrap()
            .entry(channel.to_string())
            .or_insert_with(|| Arc::new(Notify::new()))
            .clone();
        Wakeup {
            notify,
            channel: channel.to_string(),
            all: self.clone(),
        }
    }

    /// What the server said this session listens on.
    pub fn session_listens(&self, channels: HashSet<String>) {
        *self.1.lock().unwrap() = channels;
    }

    /// Whether the server said this session listens on `channel`: its wake-ups reach us.
    pub fn hears(&self, channel: &str) -> bool {
        self.1.lock().unwrap().contains(channel)
    }

    /// Every channel a waiter of this process listens on.
    pub fn channels(&self) -> Vec<String> {
        self.0.lock().unwrap().keys().cloned().collect()
    }

    fn deliver(&self, channel: &str) {
        if let Some(n) = self.0.lock().unwrap().get(channel) {
            n.notify_one();
        }
    }
}

pub struct Wakeup {
    notify: Arc<Notify>,
    channel: String,
    all: Arc<Wakeups>,
}

impl Drop for Wakeup {
    fn drop(&mut self) {
        let mut all = self.all.0.lock().unwrap();
        // The map's reference and ours: no other listener of this channel is left.
        if Arc::strong_count(&self.notify) == 2 {
            all.remove(&self.channel);
        }
    }
}

#[async_trait]
impl Listener for Wakeup {
    async fn changed(&mut self, max: Duration) {
        let _ = tokio::time::timeout(max, self.notify.notified()).await;
    }
}

/// Run the connection on this runtime until it closes, passing notifications on.
pub fn drive<S, T>(mut conn: Connection<S, T>, wakeups: Arc<Wakeups>)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    tokio::spawn(async move {
        let mut messages = futures_util::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(m) = messages.next().await {
            match m {
                Ok(AsyncMessage::Notification(n)) => wakeups.deliver(n.channel()),
                Ok(_) => {}
                Err(_) => break,
            }
        }
    });
}

/// A rustls connector that trusts the URL's `?ca_file=`, `ca` (dlock always verifies the
/// server, chain and host name).
pub fn tls_connector(
    files: &crate::store::tls::Files,
    ca: &[u8],
) -> StoreResult<tokio_postgres_rustls::MakeRustlsConnect> {
    use rustls::pki_types::CertificateDer;
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(ca) {
        let cert = cert.map_err(|e| StoreError::invalid(format!("ca_file: {e}")))?;
        roots
            .add(cert)
            .map_err(|e| StoreError::invalid(format!("ca_file: {e}")))?;
    }
    let builder = rustls::ClientConfig::builder().with_root_certificates(roots);
    let config = match &files.identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => {
            let certs = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| StoreError::invalid(format!("cert_file: {e}")))?;
            let key = rustls::pki_types::PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| StoreError::invalid(format!("key_file: {e}")))?;
            builder
                .with_client_auth_cert(certs, key)
                .map_err(|e| StoreError::invalid(format!("cert_file: {e}")))?
        }
    };
    Ok(tokio_postgres_rustls::MakeRustlsConnect::new(config))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::Wakeups;
    use crate::store::Listener;

    /// A waiter that listens again keeps its wake-ups after the old listener goes. (When
    /// dropping the old one took the channel out, every later release of a waiter whose
    /// store had erred once went unheard, and it waited for its next poll.)
    #[tokio::test]
    async fn a_listener_opened_again_still_hears_after_the_old_one_goes() {
        let all = Arc::new(Wakeups::default());
        let old = all.register("c");
        let mut new = all.register("c");
        drop(old);
        assert_eq!(all.channels(), vec!["c".to_string()]);
        all.deliver("c");
        let heard = tokio::time::timeout(Duration::from_secs(5), new.changed(Duration::MAX));
        assert!(heard.await.is_ok());
        drop(new);
        assert!(
            all.channels().is_empty(),
            "the channel outlived its listeners"
        );
    }

    /// A wake-up that reached the old listener before the new one opened is not lost.
    #[tokio::test]
    async fn a_wake_up_heard_before_listening_again_carries_over() {
        let all = Arc::new(Wakeups::default());
        let old = all.register("c");
        all.deliver("c");
        let mut new = all.register("c");
        drop(old);
        let heard = tokio::time::timeout(Duration::from_secs(5), new.changed(Duration::MAX));
        assert!(heard.await.is_ok());
    }
}
