//! What the registry (`store::registry`) says of one kind of store: the URL schemes that name
//! it, how its URLs name a store, how a client is opened, and what it offers beyond the common
//! contract. It sits with the contract, below every adapter, so that the registry's table can
//! point at each adapter while the adapters know nothing of the table.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::server::ServerUrl;
use super::{Store, StoreResult};

/// One kind of store, as one entry of the registry declares it.
pub struct Kind {
    /// The store as the help and the package's description name it in a sentence ("Redis",
    /// "a file store"); kinds that share it (Redis and Redis Cluster) are named once.
    pub named: &'static str,
    /// Every scheme a URL of this kind may start with, in the order messages list them.
    pub schemes: &'static [Scheme],
    /// How a URL names the store, and how a client of it is opened.
    pub address: Address,
    /// What the store offers beyond the common contract (the conformance suite reads them).
    pub caps: Caps,
}

impl Kind {
    /// The kind's own scheme: its first.
    pub fn scheme(&self) -> &'static str {
        self.schemes[0].name
    }

    /// Whether the store is this host's own file system, with no network in between.
    pub fn local(&self) -> bool {
        matches!(self.address, Address::Dir { .. })
    }
}

// Kinds are told apart by their own scheme: a URL compares equal to the same URL parsed again.
impl PartialEq for Kind {
    fn eq(&self, other: &Kind) -> bool {
        self.scheme() == other.scheme()
    }
}

impl Eq for Kind {}

impl std::fmt::Debug for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Kind({})", self.scheme())
    }
}

/// One URL scheme, and whether it speaks TLS (`rediss://`).
#[derive(Clone, Copy, Debug)]
pub struct Scheme {
    pub name: &'static str,
    pub tls: bool,
}

impl Scheme {
    pub const fn plain(name: &'static str) -> Scheme {
        Scheme { name, tls: false }
    }
    pub const fn tls(name: &'static str) -> Scheme {
        Scheme { name, tls: true }
    }
}

/// A client being opened.
pub type Opening<'a> = Pin<Box<dyn Future<Output = StoreResult<Arc<dyn Store>>> + Send + 'a>>;

/// How a kind's URLs name its store. Each shape carries its own way to open a client, so an
/// opener is only ever handed the location its kind parses.
pub enum Address {
    /// `SCHEME:///absolute/dir`, with `?network=1` for a network or FUSE file system: a
    /// directory on this host, opened without I/O to a server (namespace, `network`).
    Dir {
        open: fn(&Path, &str, bool) -> StoreResult<Arc<dyn Store>>,
    },
    /// `SCHEME://[user[:password]@]host[:port][,host...][/path][?params]`: servers.
    Hosts {
        /// The port of a host given without one.
        default_port: u16,
        /// Whether one URL may name several hosts, and what to suggest where it may not.
        several: Several,
        /// Connect for a namespace, each request bounded by the timeout.
        open: for<'a> fn(&'a ServerUrl, &'a str, Duration) -> Opening<'a>,
    },
    /// `SCHEME://NAME[/PATH][?params]`: a bucket (or table) of a cloud service rather than a
    /// server; its endpoint, region and credentials come from the parameters and the
    /// environment. Read as a `ServerUrl` whose one host is the name, without a port.
    Bucket {
        open: for<'a> fn(&'a ServerUrl, &'a str, Duration) -> Opening<'a>,
    },
}

/// Whether one URL may list several hosts (the members of one etcd cluster or ZooKeeper
/// ensemble, the seed nodes of a Redis Cluster).
#[derive(Clone, Copy, Debug)]
pub enum Several {
    Yes,
    /// One server: a quorum is several `--store`s.
    No,
    /// One server, and the kind of the same scheme with this suffix takes several (`redis` and
    /// `redis+cluster`, "a Redis Cluster").
    Elsewhere {
        suffix: &'static str,
        what: &'static str,
    },
}

/// Where a store URL points, as its kind's `Address` reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    /// `network`: `?network=1`, the directory may be on a network or FUSE file system.
    Dir { dir: PathBuf, network: bool },
    /// The servers, with credentials resolved.
    Server(ServerUrl),
}

/// What one store offers beyond the common contract.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    /// `inspect` lists the waiter a queued attempt registered (etcd and ZooKeeper queues,
    /// Redis's line, the file store's queue).
    pub shows_waiters: bool,
    /// Waiters are served in queue order: a shared attempt does not pass a queued exclusive
    /// one (etcd revisions, ZooKeeper sequence nodes, Redis's line, the file store's tickets).
    pub fifo: bool,
    /// A `run` (not detached) lease lives in the client's session, which keeps it alive:
    /// renewing checks the owner but moves no store-side expiry (ZooKeeper).
    pub session_leases: bool,
    /// A ttl the store expires promptly: etcd rounds shorter leases up to its minimum.
    pub short_ttl: Duration,
    /// A release wakes a listening waiter (on S3 and DynamoDB, a release made on the waiter's
    /// host: the suite's clients share one). Not behind PgBouncer in transaction mode, where a
    /// LISTEN stays with the server connection it ran on: there a waiter finds the lock free
    /// by looking again after `MAX_POLL`, as the engine's waiters always do.
    pub notified: bool,
    /// A waiter whose client is gone without a release (a killed process) leaves the
    /// waiters `inspect` lists within its ttl and a second: its entry lives on a lease,
    /// a session or a row of that life. Not the in-memory store, whose waiters live as long
    /// as the store itself.
    pub dead_waiters_leave: bool,
}

impl Caps {
    /// The common contract and nothing beyond it.
    pub const PLAIN: Caps = Caps {
        shows_waiters: false,
        fifo: false,
        session_leases: false,
        short_ttl: Duration::from_secs(2),
        notified: true,
        dead_waiters_leave: true,
    };
}

impl Default for Caps {
    fn default() -> Caps {
        Caps::PLAIN
    }
}
