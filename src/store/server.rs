//! What a server-backed store URL names: its hosts, credentials, path and parameters, parsed
//! the same way for every kind of server (`store::url` picks the kind by the scheme). Secrets
//! may come from the URL, a file (`?password_file=`) or an environment variable
//! (`?password_env=`, or `DLOCK_PASSWORD`), so they need not appear in `ps`.

use std::fmt;

use super::kind::Several;

/// One host of a store.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostPort {
    pub host: String,
    pub port: u16,
}

/// Port 0 (never a server's) marks a bucket's name, shown without one.
impl fmt::Display for HostPort {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.port == 0 {
            return f.write_str(&self.host);
        }
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

/// Parse what follows `SCHEME://` for a kind of server: `default_port` for a host without one,
/// `several` for whether the URL may list more than one host.
pub(crate) fn parse_server(
    scheme: &str,
    rest: &str,
    default_port: u16,
    tls: bool,
    several: Several,
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
    let (user, password) = match userinfo {
        Some(info) => parse_userinfo(info)?,
        None => (None, None),
    };
    let hosts = parse_hosts(scheme, hostlist, default_port, several)?;
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
    resolve_password(&mut url, env)?;
    Ok(url)
}

/// `user[:password]` before the `@`, percent-decoded.
fn parse_userinfo(info: &str) -> Result<(Option<String>, Option<String>), String> {
    let (u, p) = match info.split_once(':') {
        Some((u, p)) => (u, Some(p)),
        None => (info, None),
    };
    let user = match u {
        "" => None,
        u => Some(percent_decode(u)?),
    };
    Ok((user, p.map(percent_decode).transpose()?))
}

/// The comma-separated hosts, as many as the kind allows.
fn parse_hosts(
    scheme: &str,
    hostlist: &str,
    default_port: u16,
    several: Several,
) -> Result<Vec<HostPort>, String> {
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
    let one =
        format!("{scheme}:// names one server; give each server its own --store for a quorum");
    match several {
        _ if hosts.len() < 2 => Ok(hosts),
        Several::Yes => Ok(hosts),
        Several::No => Err(one),
        Several::Elsewhere { suffix, what } => {
            Err(format!("{one}, or use {scheme}{suffix}:// for {what}"))
        }
    }
}

/// The password from `?password_file=` or `?password_env=` (either replaces one in the URL),
/// else from `DLOCK_PASSWORD` where the URL gives none.
fn resolve_password(
    url: &mut ServerUrl,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(), String> {
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
    Ok(())
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

pub(crate) fn percent_decode(s: &str) -> Result<String, String> {
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
