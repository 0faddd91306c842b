//! From a `redis://` or `redis+cluster://` URL to connection settings: hosts, database,
//! credentials and the TLS files of `rediss://`.

use redis::{Client, ConnectionAddr, IntoConnectionInfo};

use super::classify;
use crate::store::url::{HostPort, ServerUrl};
use crate::store::{StoreError, StoreResult};

/// How to reach one host of the URL.
pub(super) fn connection_info(
    url: &ServerUrl,
    host: &HostPort,
    cluster: bool,
) -> StoreResult<redis::ConnectionInfo> {
    let db = match url.path.trim_start_matches('/') {
        "" => 0,
        _ if cluster => {
            return Err(StoreError::Invalid(
                "a Redis Cluster has only database 0; drop the /db".into(),
            ));
        }
        d => d.parse::<i64>().map_err(|_| {
            StoreError::Invalid(format!("the database {d:?} is not a number; write e.g. /0"))
        })?,
    };
    let addr = if url.tls {
        ConnectionAddr::TcpTls {
            host: host.host.clone(),
            port: host.port,
            insecure: false,
            tls_params: None,
        }
    } else {
        ConnectionAddr::Tcp(host.host.clone(), host.port)
    };
    let mut settings = redis::RedisConnectionInfo::default()
        .set_db(db)
        .set_skip_set_lib_name();
    if let Some(u) = &url.user {
        settings = settings.set_username(u);
    }
    if let Some(p) = &url.password {
        settings = settings.set_password(p);
    }
    Ok(addr
        .into_connection_info()
        .map_err(classify)?
        .set_redis_settings(settings)
        // Small requests to several servers at once: do not let Nagle hold any of them back.
        .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true)))
}

/// `?ca_file=`, `?cert_file=`, `?key_file=` of a `rediss://` URL.
pub(super) struct TlsFiles {
    tls: bool,
    ca: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

impl TlsFiles {
    pub(super) fn take(url: &mut ServerUrl) -> StoreResult<TlsFiles> {
        let files = TlsFiles {
            tls: url.tls,
            ca: url.take_param("ca_file"),
            cert: url.take_param("cert_file"),
            key: url.take_param("key_file"),
        };
        if !url.tls && (files.ca.is_some() || files.cert.is_some() || files.key.is_some()) {
            return Err(StoreError::Invalid(
                "ca_file, cert_file and key_file need a rediss:// URL".into(),
            ));
        }
        if files.cert.is_some() != files.key.is_some() {
            return Err(StoreError::Invalid(
                "cert_file and key_file go together".into(),
            ));
        }
        Ok(files)
    }

    pub(super) fn certificates(&self) -> StoreResult<redis::TlsCertificates> {
        crate::tls::install_provider();
        let read = |p: &str| {
            std::fs::read(p).map_err(|e| StoreError::Invalid(format!("cannot read {p}: {e}")))
        };
        let client_tls = match (&self.cert, &self.key) {
            (Some(c), Some(k)) => Some(redis::ClientTlsConfig {
                client_cert: read(c)?,
                client_key: read(k)?,
            }),
            _ => None,
        };
        Ok(redis::TlsCertificates {
            client_tls,
            root_cert: self.ca.as_deref().map(read).transpose()?,
        })
    }

    pub(super) fn client(&self, info: redis::ConnectionInfo) -> StoreResult<Client> {
        if self.tls {
            Client::build_with_tls(info, self.certificates()?).map_err(classify)
        } else {
            Client::open(info).map_err(classify)
        }
    }
}
