//! Every kind of store dlock knows, each declared once: its schemes, how its URLs name it
//! (default port, several hosts or one), how a client is opened, and what it offers beyond
//! the contract. Store URLs (`store::url`: parsing, and opening the store one names), `--help`,
//! the package's description (by a test) and the conformance suite's subjects (by a test) all
//! read this table.
//!
//! A new store is its folder under `src/store/`, one entry here (and its line in `KINDS`), and
//! its test fixture. The table sits above the adapters: it names each of them, and none of
//! them knows it.

use std::future::Future;
use std::sync::Arc;

use super::kind::{Address, Caps, Kind, Opening, Scheme, Several};
use super::{Store, StoreResult};
use super::{dynamodb, etcd, file, mysql, nats, postgres, redis, s3, zk};

/// Every kind, in the order `--help` and messages list them.
pub static KINDS: [&Kind; 10] = [
    &FILE,
    &REDIS,
    &REDIS_CLUSTER,
    &ETCD,
    &ZOOKEEPER,
    &POSTGRES,
    &MYSQL,
    &S3,
    &NATS,
    &DYNAMODB,
];

/// The embedded store: a directory on this host, no server (the default).
pub static FILE: Kind = Kind {
    named: "a file store",
    schemes: &[Scheme::plain("file")],
    address: Address::Dir {
        open: |dir, namespace, network| {
            let options = file::Options { network };
            file::FileStore::open(dir, namespace, options).map(|s| Arc::new(s) as Arc<dyn Store>)
        },
    },
    caps: Caps {
        shows_waiters: true,
        fifo: true,
        ..Caps::PLAIN
    },
};

/// Waiters stand in a line kept inside the grant's own script, served in arrival order.
const REDIS_CAPS: Caps = Caps {
    shows_waiters: true,
    fifo: true,
    ..Caps::PLAIN
};

pub static REDIS: Kind = Kind {
    named: "Redis",
    schemes: &[Scheme::plain("redis"), Scheme::tls("rediss")],
    address: Address::Hosts {
        default_port: 6379,
        several: Several::Elsewhere {
            suffix: "+cluster",
            what: "a Redis Cluster",
        },
        open: |url, namespace, timeout| opened(redis::RedisStore::connect(url, namespace, timeout)),
    },
    caps: REDIS_CAPS,
};

/// The hosts of a Redis Cluster URL are seed nodes; the slot map names the rest.
pub static REDIS_CLUSTER: Kind = Kind {
    named: "Redis",
    schemes: &[
        Scheme::plain("redis+cluster"),
        Scheme::tls("rediss+cluster"),
    ],
    address: Address::Hosts {
        default_port: 6379,
        several: Several::Yes,
        open: |url, namespace, timeout| {
            opened(redis::RedisStore::connect_cluster(url, namespace, timeout))
        },
    },
    caps: REDIS_CAPS,
};

pub static ETCD: Kind = Kind {
    named: "etcd",
    schemes: &[Scheme::plain("etcd"), Scheme::tls("etcds")],
    address: Address::Hosts {
        default_port: 2379,
        several: Several::Yes,
        open: |url, namespace, timeout| opened(etcd::EtcdStore::connect(url, namespace, timeout)),
    },
    // Revisions order the queue.
    caps: Caps {
        shows_waiters: true,
        fifo: true,
        ..Caps::PLAIN
    },
};

pub static ZOOKEEPER: Kind = Kind {
    named: "ZooKeeper",
    schemes: &[Scheme::plain("zk")],
    address: Address::Hosts {
        default_port: 2181,
        several: Several::Yes,
        open: |url, namespace, timeout| {
            opened(std::future::ready(zk::ZkStore::open(
                url, namespace, timeout,
            )))
        },
    },
    // Sequence nodes order the queue; a `run` lease lives in the client's session.
    caps: Caps {
        shows_waiters: true,
        fifo: true,
        session_leases: true,
        ..Caps::PLAIN
    },
};

/// The SQL stores keep waiter rows (shown by inspect) and serve waiters by wake-up rather
/// than in queue order.
const SQL_CAPS: Caps = Caps {
    shows_waiters: true,
    ..Caps::PLAIN
};

pub static POSTGRES: Kind = Kind {
    named: "PostgreSQL",
    schemes: &[Scheme::plain("postgres"), Scheme::plain("postgresql")],
    address: Address::Hosts {
        default_port: 5432,
        several: Several::No,
        open: |url, namespace, timeout| {
            opened(postgres::Postgres::connect(url, namespace, timeout))
        },
    },
    caps: SQL_CAPS,
};

pub static MYSQL: Kind = Kind {
    named: "MySQL/MariaDB",
    schemes: &[Scheme::plain("mysql"), Scheme::plain("mariadb")],
    address: Address::Hosts {
        default_port: 3306,
        several: Several::No,
        open: |url, namespace, timeout| opened(mysql::Mysql::connect(url, namespace, timeout)),
    },
    caps: SQL_CAPS,
};

/// An S3 bucket: S3 notifies nobody, so waiters poll (and keep no row to show), and a
/// release made on a waiter's host rings it (`store::hostbell`).
pub static S3: Kind = Kind {
    named: "S3",
    schemes: &[Scheme::plain("s3")],
    address: Address::Bucket {
        open: |url, namespace, timeout| opened(s3::connect(url, namespace, timeout)),
    },
    caps: Caps::PLAIN,
};

/// A DynamoDB table: DynamoDB notifies nobody either, so waiters poll and are rung as on S3.
pub static DYNAMODB: Kind = Kind {
    named: "DynamoDB",
    schemes: &[Scheme::plain("dynamodb")],
    address: Address::Bucket {
        open: |url, namespace, timeout| opened(dynamodb::connect(url, namespace, timeout)),
    },
    caps: Caps::PLAIN,
};

/// NATS JetStream KV: one record per name in a bucket, leases expired by the server.
pub static NATS: Kind = Kind {
    named: "NATS",
    schemes: &[Scheme::plain("nats"), Scheme::tls("tls")],
    address: Address::Hosts {
        default_port: 4222,
        several: Several::Yes,
        open: |url, namespace, timeout| opened(nats::Nats::connect(url, namespace, timeout)),
    },
    caps: SQL_CAPS,
};

/// An adapter's connect as the table's openers answer it.
fn opened<'a, S: Store + 'static>(
    connect: impl Future<Output = StoreResult<S>> + Send + 'a,
) -> Opening<'a> {
    Box::pin(async move { Ok(Arc::new(connect.await?) as Arc<dyn Store>) })
}

/// The kind a scheme (lower case) names, and whether that scheme speaks TLS.
pub fn by_scheme(scheme: &str) -> Option<(&'static Kind, bool)> {
    KINDS.iter().find_map(|k| {
        let s = k.schemes.iter().find(|s| s.name == scheme)?;
        Some((*k, s.tls))
    })
}

/// Every scheme a store URL may start with, for messages and for `--help`:
/// "file://, redis://, rediss://, ...".
pub fn schemes() -> String {
    let all: Vec<String> = KINDS
        .iter()
        .flat_map(|k| k.schemes.iter().map(|s| format!("{}://", s.name)))
        .collect();
    all.join(", ")
}

/// The stores as a sentence names them: "a file store, Redis, etcd, ... or MySQL/MariaDB".
pub fn named() -> String {
    let mut names: Vec<&str> = Vec::new();
    for k in KINDS {
        if !names.contains(&k.named) {
            names.push(k.named);
        }
    }
    match names.split_last() {
        Some((last, rest)) if !rest.is_empty() => format!("{} or {last}", rest.join(", ")),
        _ => names.concat(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_scheme_names_one_kind() {
        for k in KINDS {
            for s in k.schemes {
                assert_eq!(
                    by_scheme(s.name).map(|(kind, _)| kind),
                    Some(k),
                    "{}",
                    s.name
                );
            }
        }
    }

    /// Cargo.toml says what the package is: a kind added to the table and not to its
    /// description fails here.
    #[test]
    fn the_package_description_names_every_store() {
        let description = env!("CARGO_PKG_DESCRIPTION");
        assert!(description.contains(&named()), "{description}");
        let manifest = include_str!("../../Cargo.toml");
        let deb = manifest
            .split("extended-description = \"\"\"")
            .nth(1)
            .and_then(|rest| rest.split("\"\"\"").next())
            .expect("Cargo.toml has the Debian package's extended description");
        for k in KINDS {
            assert!(deb.contains(k.named), "{} is not in {deb:?}", k.named);
        }
    }
}
