//! From a `redis://` or `redis+cluster://` URL to connection settings: hosts, database,
//! credentials and the TLS files of `rediss://`.

use std::collections::HashMap;

use redis::cluster::NodeAddress;
use redis::{Client, ConnectionAddr, IntoConnectionInfo};

use super::classify;
use crate::store::server::{HostPort, ServerUrl, parse_host};
use crate::store::tls::Files;
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

/// `?nat_map=ANNOUNCED=REACHABLE,...` of a `redis+cluster://` URL: where to connect for each
/// address the nodes announce (`CLUSTER SLOTS`, `MOVED`), for a cluster behind NAT, in
/// containers, or behind a proxy, whose nodes announce addresses this host cannot reach as
/// they are. Each side is `host:port` (`[v6]:port`); an announced address not in the map is
/// used as it is.
pub(super) fn nat_map(spec: &str) -> StoreResult<HashMap<NodeAddress, NodeAddress>> {
    let bad = |why: String| {
        StoreError::invalid(format!(
            "nat_map: {why}; write announced=reachable pairs separated by commas, e.g. \
             nat_map=10.0.0.5:6379=127.0.0.1:7001,10.0.0.6:6379=127.0.0.1:7002"
        ))
    };
    let address = |a: &str| -> StoreResult<NodeAddress> {
        if !a.trim_start_matches('[').contains(':') || a.ends_with(']') {
            return Err(bad(format!("{a:?} has no port")));
        }
        let h = parse_host(a, 0).map_err(bad)?;
        Ok(NodeAddress::new(h.host, h.port))
    };
    let mut map = HashMap::new();
    for pair in spec.split(',').filter(|p| !p.is_empty()) {
        let (from, to) = pair
            .split_once('=')
            .ok_or_else(|| bad(format!("{pair:?} is not announced=reachable")))?;
        if map.insert(address(from)?, address(to)?).is_some() {
            return Err(bad(format!("{from:?} is mapped twice")));
        }
    }
    if map.is_empty() {
        return Err(bad("it maps nothing".to_string()));
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nat_map_pairs_announced_with_reachable_addresses() {
        let m = nat_map("10.0.0.5:6379=127.0.0.1:7001,[fd00::1]:6380=proxy.local:7002").unwrap();
        assert_eq!(m.len(), 2);
        assert_eq!(
            m[&NodeAddress::new("10.0.0.5", 6379)],
            NodeAddress::new("127.0.0.1", 7001)
        );
        assert_eq!(
            m[&NodeAddress::new("fd00::1", 6380)],
            NodeAddress::new("proxy.local", 7002)
        );
    }

    #[test]
    fn nat_map_refuses_what_it_cannot_read() {
        for spec in [
            "",
            "10.0.0.5:6379",
            "10.0.0.5=127.0.0.1:7001",
            "10.0.0.5:6379=127.0.0.1",
            "10.0.0.5:6379=127.0.0.1:0",
            "a:1=b:2,a:1=c:3",
            "bad host:1=b:2",
        ] {
            let e = nat_map(spec).expect_err(spec);
            assert!(e.to_string().contains("nat_map"), "{spec}: {e}");
        }
    }
}
