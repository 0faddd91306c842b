//! Store URLs: parsing, defaults, secrets, and the redacted form used in every message.
//!
//! Parsed by hand because several schemes name a list of hosts (`etcd://a:2379,b:2379`), which
//! general URL parsers reject. Secrets may come from the URL, a file (`?password_file=`) or an
//! environment variable (`?password_env=`, or `DLOCK_PASSWORD`), so they need not appear in `ps`.

use std::fmt;
use std::path::PathBuf;

/// One host of a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

/// What a server-backed URL names, with its credentials resolved.
#[derive(Clone, PartialEq, Eq)]
pub struct ServerUrl {
    pub scheme: String,
    pub tls: bool,
    pub hosts: Vec<HostPort>,
    pub user: Option<String>,
    pub password: Option<String>,
    /// Path after the hosts: the Redis db number, the ZooKeeper chroot.
    pub path: String,
    /// Query parameters the backend has not consumed yet (each backend checks its own).
    pub params: Vec<(String, String)>,
}

impl ServerUrl {
    /// Take a query parameter out, so leftovers can be reported as unknown.
    pub fn take_param(&mut self, key: &str) -> Option<String> {
        let i = self.params.iter().position(|(k, _)| k == key)?;
        Some(self.params.remove(i).1)
    }

    /// Fail on any parameter no one took: a typo must not silently change behaviour.
    pub fn reject_unknown_params(&self) -> Result<(), String> {
        match self.params.first() {
            None => Ok(()),
            Some((k, _)) => Err(format!("unknown parameter {k:?} in the store URL")),
        }
    }
}

// Debug must not leak the password either (errors are printed with {:?} in places).
impl fmt::Debug for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{self}")
    }
}

/// Redacted: the password never appears.
impl fmt::Display for ServerUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://", self.scheme)?;
        match (&self.user, &self.password) {
            (Some(u), Some(_)) => write!(f, "{u}:***@")?,
            (Some(u), None) => write!(f, "{u}@")?,
            (None, Some(_)) => write!(f, ":***@")?,
            (None, None) => {}
        }
        let hosts: Vec<String> = self.hosts.iter().map(|h| h.to_string()).collect();
        write!(f, "{}{}", hosts.join(","), self.path)
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoreUrl {
    /// `network`: `?network=1`, the directory may be on a network or FUSE file system.
    File {
        dir: PathBuf,
        network: bool,
    },
    Redis(ServerUrl),
    RedisCluster(ServerUrl),
    Etcd(ServerUrl),
    Zk(ServerUrl),
    Postgres(ServerUrl),
    Mysql(ServerUrl),
}

impl StoreUrl {
    pub fn scheme(&self) -> &str {
        match self {
            StoreUrl::File { .. } => "file",
            StoreUrl::Redis(s)
            | StoreUrl::RedisCluster(s)
            | StoreUrl::Etcd(s)
            | StoreUrl::Zk(s)
            | StoreUrl::Postgres(s)
            | StoreUrl::Mysql(s) => &s.scheme,
        }
    }

    /// The default store: one directory per user per host, whatever the session (see
    /// `store::file::dir`).
    pub fn default_file() -> StoreUrl {
        StoreUrl::File {
            dir: super::file::dir::default_dir().path,
            network: false,
        }
    }
}

impl fmt::Display for StoreUrl {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreUrl::File { dir, network } => {
                write!(f, "file://{}", dir.display())?;
                if *network {
                    f.write_str("?network=1")?;
                }
                Ok(())
            }
            StoreUrl::Redis(s)
            | StoreUrl::RedisCluster(s)
            | StoreUrl::Etcd(s)
            | StoreUrl::Zk(s)
            | StoreUrl::Postgres(s)
            | StoreUrl::Mysql(s) => {
                write!(f, "{s}")
            }
        }
    }
}

/// Every scheme a store URL may start with: the one list, for messages and for `--help`.
#[macro_export]
macro_rules! store_schemes {
    () => {
        "file://, redis://, rediss://, redis+cluster://, rediss+cluster://, etcd://, etcds://, \
         zk://, postgres://, postgresql://, mysql://, mariadb://"
    };
}

const SCHEMES: &str = store_schemes!();

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
    let (scheme, rest) = input.split_once("://").ok_or_else(|| {
        let several = if input.contains(',') {
            "; several stores are given by repeating --store (or comma-separated in \
             DLOCK_STORE), each a whole URL"
        } else {
            ""
        };
        format!("{shown:?} is not a store URL; it starts with one of {SCHEMES}{several}")
    })?;
    let scheme = scheme.to_ascii_lowercase();
    if scheme == "file" {
        let (path, query) = rest.split_once('?').unwrap_or((rest, ""));
        if !path.starts_with('/') {
            return Err(format!(
                "{shown:?}: a file store URL is file:///absolute/dir"
            ));
        }
        let network = match query {
            "" => false,
            "network=1" => true,
            _ => {
                return Err(format!(
                    "{shown:?}: a file store URL takes only ?network=1 (allow a network or                      FUSE file system), as in file:///absolute/dir?network=1"
                ));
            }
        };
        return Ok(StoreUrl::File {
            dir: PathBuf::from(percent_decode(path).map_err(|e| format!("{shown:?}: {e}"))?),
            network,
        });
    }
    let (default_port, tls, multi) = match scheme.as_str() {
        "redis" => (6379, false, false),
        "rediss" => (6379, true, false),
        "redis+cluster" => (6379, false, true),
        "rediss+cluster" => (6379, true, true),
        "etcd" => (2379, false, true),
        "etcds" => (2379, true, true),
        "zk" => (2181, false, true),
        "postgres" | "postgresql" => (5432, false, false),
        "mysql" | "mariadb" => (3306, false, false),
        _ => {
            return Err(format!(
                "{shown:?}: unknown scheme {scheme:?}; use one of {SCHEMES}"
            ));
        }
    };
    let server = parse_server(&scheme, rest, default_port, tls, multi, env)
        .map_err(|e| format!("{shown:?}: {e}"))?;
    Ok(match scheme.as_str() {
        "redis" | "rediss" => StoreUrl::Redis(server),
        "redis+cluster" | "rediss+cluster" => StoreUrl::RedisCluster(server),
        "etcd" | "etcds" => StoreUrl::Etcd(server),
        "postgres" | "postgresql" => StoreUrl::Postgres(server),
        "mysql" | "mariadb" => StoreUrl::Mysql(server),
        _ => StoreUrl::Zk(server),
    })
}

fn parse_server(
    scheme: &str,
    rest: &str,
    default_port: u16,
    tls: bool,
    multi: bool,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<ServerUrl, String> {
    let (rest, query) = rest.split_once('?').unwrap_or((rest, ""));
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    let (userinfo, hostlist) = match authority.rfind('@') {
        Some(i) => (Some(&authority[..i]), &authority[i + 1..]),
        None => (None, authority),
    };
    let (mut user, mut password) = (None, None);
    if let Some(info) = userinfo {
        let (u, p) = match info.split_once(':') {
            Some((u, p)) => (u, Some(p)),
            None => (info, None),
        };
        if !u.is_empty() {
            user = Some(percent_decode(u)?);
        }
        if let Some(p) = p {
            password = Some(percent_decode(p)?);
        }
    }
    if hostlist.is_empty() {
        return Err("no host given; write e.g. 127.0.0.1:6379".into());
    }
    let mut hosts = Vec::new();
    for h in hostlist.split(',') {
        if h.is_empty() {
            return Err(
                "an empty host in the list (a stray comma?); several stores are given \
                 by repeating --store (or comma-separated in DLOCK_STORE)"
                    .into(),
            );
        }
        hosts.push(parse_host(h, default_port)?);
    }
    if hosts.len() > 1 && !multi && !scheme.starts_with("redis") {
        return Err(format!(
            "{scheme}:// names one server; give each server its own --store for a quorum"
        ));
    }
    if hosts.len() > 1 && !multi {
        return Err(format!(
            "{scheme}:// names one server; give each server its own --store for a quorum, \
             or use {scheme}+cluster:// for a Redis Cluster"
        ));
    }
    let mut params = Vec::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        params.push((percent_decode(k)?, percent_decode(v)?));
    }
    let mut url = ServerUrl {
        scheme: scheme.to_string(),
        tls,
        hosts,
        user,
        password,
        path: path.to_string(),
        params,
    };
    if let Some(file) = url.take_param("password_file") {
        let text = std::fs::read_to_string(&file)
            .map_err(|e| format!("cannot read password_file {file:?}: {e}"))?;
        url.password = Some(text.trim_end_matches(['\n', '\r']).to_string());
    }
    if let Some(var) = url.take_param("password_env") {
        url.password =
            Some(env(&var).ok_or_else(|| format!("password_env names {var:?}, which is not set"))?);
    }
    if url.password.is_none() {
        url.password = env("DLOCK_PASSWORD").filter(|p| !p.is_empty());
    }
    Ok(url)
}

pub(crate) fn parse_host(h: &str, default_port: u16) -> Result<HostPort, String> {
    let (host, port) = if let Some(v6) = h.strip_prefix('[') {
        let (host, after) = v6
            .split_once(']')
            .ok_or_else(|| format!("{h:?} opens [ without closing it"))?;
        (host, after.strip_prefix(':'))
    } else {
        match h.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (h, None),
        }
    };
    if host.is_empty()
        || !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || ".-_:".contains(c))
    {
        return Err(format!("{h:?} is not a host name or address"));
    }
    let port = match port {
        None => default_port,
        Some(p) => match p.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(format!("port {p:?} is not a number from 1 to 65535")),
        },
    };
    Ok(HostPort {
        host: host.to_string(),
        port,
    })
}

fn percent_decode(s: &str) -> Result<String, String> {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = s
                .get(i + 1..i + 3)
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or("a % must be followed by two hex digits")?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| "percent-encoding that is not UTF-8".to_string())
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
        for scheme in super::SCHEMES.split(", ") {
            let url = match scheme {
                "file://" => "file:///tmp".to_string(),
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
        match parse_with_env(s, &no_env).unwrap() {
            StoreUrl::Redis(u)
            | StoreUrl::RedisCluster(u)
            | StoreUrl::Etcd(u)
            | StoreUrl::Zk(u)
            | StoreUrl::Postgres(u)
            | StoreUrl::Mysql(u) => u,
            StoreUrl::File { .. } => panic!("file"),
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
            Ok(StoreUrl::File {
                dir: "/var/lib/dlock".into(),
                network: false,
            })
        );
        assert!(parse_with_env("file://relative", &no_env).is_err());
        let net = parse_with_env("file:///mnt/nfs/locks?network=1", &no_env).unwrap();
        assert_eq!(
            net,
            StoreUrl::File {
                dir: "/mnt/nfs/locks".into(),
                network: true,
            }
        );
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
        match parse_with_env("redis://h?password_env=PW", &env).unwrap() {
            StoreUrl::Redis(u) => assert_eq!(u.password.as_deref(), Some("from-env")),
            _ => unreachable!(),
        }
        assert!(parse_with_env("redis://h?password_env=NOPE", &env).is_err());
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("pw");
        std::fs::write(&f, "from-file\n").unwrap();
        match parse_with_env(&format!("redis://h?password_file={}", f.display()), &no_env).unwrap()
        {
            StoreUrl::Redis(u) => assert_eq!(u.password.as_deref(), Some("from-file")),
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
