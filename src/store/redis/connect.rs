//! From a `redis://` or `redis+cluster://` URL to connection settings: hosts, database,
//! credentials and the TLS files of `rediss://`.

use redis::{Client, ConnectionAddr, IntoConnectionInfo};

use super::classify;
use crate::store::tls::Files;
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
            return Err(StoreError::invalid(
                "a Redis Cluster has only database 0; drop the /db",
            ));
        }
        d => d.parse::<i64>().map_err(|_| {
            StoreError::invalid(format!("the database {d:?} is not a number; write e.g. /0"))
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

/// The certificates of a `rediss://` URL (see `crate::store::tls::take_files`).
pub(super) fn certificates(files: &Files) -> redis::TlsCertificates {
    redis::TlsCertificates {
        client_tls: files.identity.clone().map(|(client_cert, client_key)| {
            redis::ClientTlsConfig {
                client_cert,
                client_key,
            }
        }),
        root_cert: files.ca.clone(),
    }
}

/// A client for one host, over TLS when the URL has `tls`.
pub(super) fn client(tls: Option<&Files>, info: redis::ConnectionInfo) -> StoreResult<Client> {
    match tls {
        Some(files) => Client::build_with_tls(info, certificates(files)).map_err(classify),
        None => Client::open(info).map_err(classify),
    }
}
