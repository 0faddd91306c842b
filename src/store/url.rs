//! Store URLs: which kind of store a URL names (by its scheme, from `store::registry`), and the
//! redacted form used in every message.
//!
//! Parsed by hand because several schemes name a list of hosts (`etcd://a:2379,b:2379`), which
//! general URL parsers reject; what follows the scheme is read as its kind's `Address` says
//! (`store::server` for servers).

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use super::kind::{Address, Kind, Location};
use super::registry;
use super::server::{HostPort, ServerUrl, parse_server, percent_decode};
use super::{Store, StoreError, StoreResult};

/// A store URL: its kind, and where it points.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreUrl {
    pub kind: &'static Kind,
    pub at: Location,
}

impl StoreUrl {
    pub fn scheme(&self) -> &str {
        match &self.at {
            Location::Dir { .. } => self.kind.scheme(),
            Location::Server(s) => &s.scheme,
        }
    }

    /// The file store at `dir`.
    pub fn file(dir: PathBuf, network: bool) -> StoreUrl {
        StoreUrl {
            kind: &registry::FILE,
            at: Location::Dir { dir, network },
        }
    }

    /// The default store: one directory per user per host, whatever the session (see
    /// `store::file::dir`).
    pub fn default_file() -> StoreUrl {
        StoreUrl::file(super::file::dir::default_dir().path, false)
    }

    /// Connect to the store this URL names, for locks in `namespace`, as its kind opens.
    pub async fn open(&self, namespace: &str, timeout: Duration) -> StoreResult<Arc<dyn Store>> {
        match (&self.kind.address, &self.at) {
            (Address::Dir { open }, Location::Dir { dir, network }) => {
                open(dir, namespace, *network)
            }
            (Address::Hosts { open, .. } | Address::Bucket { open }, Location::Server(server)) => {
                open(server, namespace, timeout).await
            }
            // `parse` reads a URL as its kind's address says; only one built by hand differs.
            _ => Err(StoreError::invalid(format!(
                "{self}: not a location a {} store URL names",
                self.kind.scheme()
            ))),
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.at {
            Location::Dir { dir, network } => {
                write!(f, "{}://{}", self.kind.scheme(), dir.display())?;
                if *network {
                    f.write_str("?network=1")?;
                }
                Ok(())
            }
            Location::Server(s) => write!(f, "{s}"),
        }
    }
}

/// Parse one store URL. Errors are one line that says what is wrong and shows the right form.
pub fn parse(input: &str) -> Result<StoreUrl, String> {
    parse_with_env(input, &|k| std::env::var(k).ok())
}

/// Split `DLOCK_STORE`: URLs separated by commas, where a comma also separates the hosts of
/// one URL; a new URL starts only where a scheme (`xxx://`) follows the comma.
pub fn split_list(list: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for part in list.split(',') {
        let part = part.trim();
        let starts_url = part.contains("://") || out.is_empty();
        match out.last_mut() {
            Some(last) if !starts_url => {
                last.push(',');
                last.push_str(part);
            }
            _ if part.is_empty() => {}
            _ => out.push(part.to_string()),
        }
    }
    out
}

pub fn parse_with_env(
    input: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<StoreUrl, String> {
    let shown = redact_raw(input);
    let schemes = registry::schemes();
    let (scheme, rest) = input.split_once("://").ok_or_else(|| {
        let several = if input.contains(',') {
            "; several stores are given by repeating --store (or comma-separated in \
             DLOCK_STORE), each a whole URL"
        } else {
            ""
        };
        format!("{shown:?} is not a store URL; it starts with one of {schemes}{several}")
    })?;
    let scheme = scheme.to_ascii_lowercase();
    let Some((kind, tls)) = registry::by_scheme(&scheme) else {
        return Err(format!(
            "{shown:?}: unknown scheme {scheme:?}; use one of {schemes}"
        ));
    };
    let at = match &kind.address {
        Address::Dir { .. } => parse_dir(&shown, &scheme, rest)?,
        Address::Hosts {
            default_port,
            several,
            ..
        } => Location::Server(
            parse_server(&scheme, rest, *default_port, tls, *several, env)
                .map_err(|e| format!("{shown:?}: {e}"))?,
        ),
        Address::Bucket { .. } => {
            Location::Server(parse_bucket(&scheme, rest).map_err(|e| format!("{shown:?}: {e}"))?)
        }
    };
    Ok(StoreUrl { kind, at })
}

/// `/absolute/dir[?network=1]`, after `SCHEME://`.
fn parse_dir(shown: &str, scheme: &str, rest: &str) -> Result<Location, String> {
    let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
    if !path.starts_with('/') {
        return Err(format!(
            "{shown:?}: a {scheme} store URL is {scheme}:///absolute/dir"
        ));
    }
    let network = match query {
        "" => false,
        "network=1" => true,
        _ => {
            return Err(format!(
                "{shown:?}: a {scheme} store URL takes only ?network=1 (allow a network or \
                 FUSE file system), as in {scheme}:///absolute/dir?network=1"
            ));
        }
    };
    Ok(Location::Dir {
        dir: PathBuf::from(percent_decode(path).map_err(|e| format!("{shown:?}: {e}"))?),
        network,
    })
}

/// `NAME[/PATH][?params]`, after `SCHEME://`: the bucket (lower-case letters, digits, `.` and
/// `-`, 3 to 63 of them, as S3 allows) or the DynamoDB table (letters, digits, `_`, `.` and
/// `-`, 3 to 255 of them) as the one host, without a port.
fn parse_bucket(scheme: &str, rest: &str) -> Result<ServerUrl, String> {
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (name, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let table = scheme == "dynamodb";
    let plain = |c: char| {
        c.is_ascii_lowercase()
            || c.is_ascii_digit()
            || c == '.'
            || c == '-'
            || (table && (c.is_ascii_uppercase() || c == '_'))
    };
    let longest = if table { 255 } else { 63 };
    if !(3..=longest).contains(&name.len()) || !name.chars().all(plain) {
        // The name is not echoed: the caller shows the URL, redacted.
        return Err(match table {
            true => "not a table name (3 to 255 letters, digits, _, . and -); write \
                     dynamodb://TABLE?region=R"
                .to_string(),
            false => format!(
                "not a bucket name (3 to 63 lower-case letters, digits, . and -); write \
                 {scheme}://BUCKET[/PREFIX]?region=R"
            ),
        });
    }
    let mut params = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        params.push((percent_decode(k)?, percent_decode(v)?));
    }
    Ok(ServerUrl {
        scheme: scheme.to_string(),
        tls: false,
        hosts: vec![HostPort {
            host: name.to_string(),
            port: 0,
        }],
        user: None,
        password: None,
        path: percent_decode(path)?.trim_end_matches('/').to_string(),
        params,
    })
}

/// Hide the password of a URL we could not parse, so even an error never shows it.
fn redact_raw(input: &str) -> String {
    let mut out = String::new();
    for c in input.chars().take(120) {
        out.push(if c.is_control() { '?' } else { c });
    }
    if let Some((scheme, rest)) = out.split_once("://") {
        let end = rest.find(['/', '?']).unwrap_or(rest.len());
        if let Some(at) = rest[..end].rfind('@')
            && let Some(colon) = rest[..at].find(':')
        {
            return format!("{scheme}://{}:***{}", &rest[..colon], &rest[at..]);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_listed_scheme_parses_and_no_other_does() {
        for scheme in super::registry::schemes().split(", ") {
            let url = match scheme {
                "file://" => "file:///tmp".to_string(),
                "s3://" => "s3://bucket/prefix?region=r".to_string(),
                "dynamodb://" => "dynamodb://Locks_1?region=r".to_string(),
                s => format!("{s}h:1/db"),
            };
            let url = url.replace(
                "h:1/db",
                if scheme.starts_with("zk")
                    || scheme.starts_with("etcd")
                    || scheme.contains("cluster")
                {
                    "h:1"
                } else {
                    "h:1/1"
                },
            );
            assert!(
                super::parse(&url).is_ok(),
                "{url}: {:?}",
                super::parse(&url)
            );
        }
        assert!(super::parse("memcached://h:1").is_err());
    }

    use super::*;

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn server(s: &str) -> ServerUrl {
        match parse_with_env(s, &no_env).unwrap().at {
            Location::Server(u) => u,
            Location::Dir { .. } => panic!("file"),
        }
    }

    #[test]
    fn postgres_urls() {
        for scheme in ["postgres", "postgresql"] {
            let u = server(&format!("{scheme}://app:pw@db:6543/locks?sslmode=require"));
            assert_eq!(
                u.hosts,
                vec![HostPort {
                    host: "db".into(),
                    port: 6543
                }]
            );
            assert_eq!(
                (u.user.as_deref(), u.path.as_str()),
                (Some("app"), "/locks")
            );
            assert_eq!(u.to_string(), format!("{scheme}://app:***@db:6543/locks"));
        }
        assert_eq!(server("postgres://h").hosts[0].port, 5432);
        let e = parse_with_env("postgres://a,b/db", &no_env).unwrap_err();
        assert!(e.contains("give each server its own --store"), "{e}");
        assert!(!e.contains("cluster"), "{e}");
    }

    #[test]
    fn redis_urls() {
        let u = server("redis://bob:s%40cret@10.0.0.1:6380/2");
        assert_eq!(
            u.hosts,
            vec![HostPort {
                host: "10.0.0.1".into(),
                port: 6380
            }]
        );
        assert_eq!(u.user.as_deref(), Some("bob"));
        assert_eq!(u.password.as_deref(), Some("s@cret"));
        assert_eq!(u.path, "/2");
        assert_eq!(u.to_string(), "redis://bob:***@10.0.0.1:6380/2");
        assert_eq!(server("rediss://h").hosts[0].port, 6379);
        assert!(server("rediss://h").tls);
    }

    #[test]
    fn dynamodb_urls() {
        let u = server("dynamodb://Team_Locks.v2?region=eu-west-1&create=1");
        assert_eq!(u.hosts[0].host, "Team_Locks.v2");
        assert_eq!(u.to_string(), "dynamodb://Team_Locks.v2");
        for bad in [
            "dynamodb://ab",
            "dynamodb://a:b",
            "dynamodb://u:hunter2@table",
        ] {
            let e = parse_with_env(bad, &no_env).unwrap_err();
            assert!(e.contains("table name") && !e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn s3_urls() {
        let u = server("s3://my-locks/team/a?region=eu-west-1&path_style=1");
        assert_eq!(u.hosts[0].host, "my-locks");
        assert_eq!(u.path, "/team/a");
        assert_eq!(u.to_string(), "s3://my-locks/team/a");
        assert_eq!(server("s3://b.c-d").to_string(), "s3://b.c-d");
        for bad in [
            "s3://",
            "s3://ab",
            "s3://Upper",
            "s3://b_c",
            "s3://u:hunter2@bucket",
        ] {
            let e = parse_with_env(bad, &no_env).unwrap_err();
            assert!(e.contains("bucket name") && !e.contains("hunter2"), "{e}");
        }
    }

    #[test]
    fn multi_host_urls() {
        let u = server("etcd://a:2379,b,[::1]:2380");
        assert_eq!(u.hosts.len(), 3);
        assert_eq!(u.hosts[1].port, 2379);
        assert_eq!(u.hosts[2].host, "::1");
        assert_eq!(server("zk://a,b/app/locks").path, "/app/locks");
    }

    #[test]
    fn file_urls() {
        assert_eq!(
            parse_with_env("file:///var/lib/dlock", &no_env),
            Ok(StoreUrl::file("/var/lib/dlock".into(), false))
        );
        assert!(parse_with_env("file://relative", &no_env).is_err());
        let net = parse_with_env("file:///mnt/nfs/locks?network=1", &no_env).unwrap();
        assert_eq!(net, StoreUrl::file("/mnt/nfs/locks".into(), true));
        assert_eq!(net.to_string(), "file:///mnt/nfs/locks?network=1");
        assert!(parse_with_env("file:///x?network=yes", &no_env).is_err());
    }

    #[test]
    fn bad_urls_say_why_without_the_password() {
        for bad in [
            "localhost:6379",
            "memcached://h",
            "redis://",
            "redis://h:0",
            "redis://h:99999",
            "redis://h:port",
            "redis://a:1,b:2",
            "redis://h%zz",
            "redis://h o",
        ] {
            let e = parse_with_env(bad, &no_env).unwrap_err();
            assert!(!e.contains('\n'), "{e}");
        }
        let e = parse_with_env("memcached://u:hunter2@h", &no_env).unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
    }

    #[test]
    fn secrets_from_env_and_file() {
        let env = |k: &str| (k == "PW").then(|| "from-env".to_string());
        match parse_with_env("redis://h?password_env=PW", &env)
            .unwrap()
            .at
        {
            Location::Server(u) => assert_eq!(u.password.as_deref(), Some("from-env")),
            _ => unreachable!(),
        }
        assert!(parse_with_env("redis://h?password_env=NOPE", &env).is_err());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "from-file\n").unwrap();
        let url = parse_with_env(&format!("redis://h?password_file={}", f.display()), &no_env);
        match url.unwrap().at {
            Location::Server(u) => assert_eq!(u.password.as_deref(), Some("from-file")),
            _ => unreachable!(),
        }
    }

    #[test]
    fn store_lists_split_on_schemes_only() {
        assert_eq!(
            split_list("redis://a:1,redis+cluster://b:1,c:2, etcd://d"),
            vec!["redis://a:1", "redis+cluster://b:1,c:2", "etcd://d"]
        );
        assert_eq!(split_list(""), Vec::<String>::new());
    }
}
