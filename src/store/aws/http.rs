//! A small HTTP/1.1 client: hyper's `client::conn::http1` over a TCP socket, through rustls
//! for `https` (the TLS stack every other store uses). Connections are kept for the next
//! request (one request at a time each; a request finding none idle dials another).

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::client::conn::http1::{self, SendRequest};
use hyper::header::HeaderMap;
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;

use crate::store::{StoreError, StoreResult};

/// Where requests go: `http[s]://host[:port]`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    pub host: String,
    pub port: u16,
}

impl Endpoint {
    /// `http://host[:port]` or `https://host[:port]`, with nothing after it but a `/`.
    pub fn parse(url: &str) -> Result<Endpoint, String> {
        if url.contains('@') {
            // Never echoed: what is before the `@` may be a secret.
            return Err(
                "an endpoint takes no user or password: the credentials come from \
                        AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY or a profile"
                    .into(),
            );
        }
        let bad = || format!("endpoint {url:?} is not http://host[:port] or https://host[:port]");
        let (scheme, rest) = url.split_once("://").ok_or_else(bad)?;
        let tls = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            _ => return Err(bad()),
        };
        let rest = rest.strip_suffix('/').unwrap_or(rest);
        if rest.contains(['/', '?', '#']) {
            return Err(bad());
        }
        let hp = crate::store::server::parse_host(rest, if tls { 443 } else { 80 })
            .map_err(|e| format!("endpoint {url:?}: {e}"))?;
        Ok(Endpoint {
            tls,
            host: hp.host,
            port: hp.port,
        })
    }

    /// The `Host` header: the port only where it is not the scheme's own.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        match (self.tls, self.port) {
            (false, 80) | (true, 443) => host,
            (_, p) => format!("{host}:{p}"),
        }
    }
}

impl std::fmt::Display for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        write!(f, "{scheme}://{}", self.authority())
    }
}

/// One response, read whole (dlock's bodies are small).
pub struct Response {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl Response {
    /// A header's value as text, if present and printable.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

type Sender = SendRequest<Full<Bytes>>;

pub struct Client {
    pub endpoint: Endpoint,
    tls: Option<tokio_rustls::TlsConnector>,
    idle: Mutex<Vec<Sender>>,
}

impl Client {
    /// `tls`: the client configuration for an `https` endpoint.
    pub fn new(endpoint: Endpoint, tls: Option<Arc<rustls::ClientConfig>>) -> Client {
        Client {
            endpoint,
            tls: tls.map(tokio_rustls::TlsConnector::from),
            idle: Mutex::new(Vec::new()),
        }
    }

    fn unreachable(&self, why: impl std::fmt::Display) -> StoreError {
        StoreError::unavailable(format!("cannot reach {}: {why}", self.endpoint))
    }

    async fn dial(&self) -> StoreResult<Sender> {
        let e = &self.endpoint;
        let tcp = TcpStream::connect((e.host.as_str(), e.port))
            .await
            .map_err(|err| self.unreachable(crate::store::io_cause(&err).unwrap_or_default()))?;
        let _ = tcp.set_nodelay(true);
        match &self.tls {
            None => self.handshake(tcp).await,
            Some(connector) => {
                let name = rustls::pki_types::ServerName::try_from(e.host.clone())
                    .map_err(|err| StoreError::invalid(format!("endpoint {e}: {err}")))?;
                let stream = connector
                    .connect(name, tcp)
                    .await
                    .map_err(|err| self.unreachable(format!("TLS: {err}")))?;
                self.handshake(stream).await
            }
        }
    }

    async fn handshake<T>(&self, io: T) -> StoreResult<Sender>
    where
        T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let (sender, conn) = http1::handshake(TokioIo::new(io))
            .await
            .map_err(|err| self.unreachable(err))?;
        tokio::spawn(async move {
            let _ = conn.await;
        });
        Ok(sender)
    }

    /// Dial a connection and keep it for the next request: a store's open proves that the
    /// endpoint takes connections without a request of its own, and the first request does
    /// not wait for the handshake.
    pub async fn connect(&self) -> StoreResult<()> {
        let sender = self.dial().await?;
        self.idle.lock().unwrap().push(sender);
        Ok(())
    }

    /// An idle connection that is still open, if any.
    fn take_idle(&self) -> Option<Sender> {
        let mut idle = self.idle.lock().unwrap();
        while let Some(s) = idle.pop() {
            if s.is_ready() && !s.is_closed() {
                return Some(s);
            }
        }
        None
    }

    /// Send one request (`target`: the path and query, as sent) and read its whole answer.
    /// A kept connection the server closed while idle fails before the request reaches it:
    /// that one is sent again on a new connection.
    pub async fn send(
        &self,
        method: &str,
        target: &str,
        headers: &[(String, String)],
        body: Bytes,
    ) -> StoreResult<Response> {
        let build = || {
            let mut b = hyper::Request::builder().method(method).uri(target);
            for (k, v) in headers {
                b = b.header(k.as_str(), v.as_str());
            }
            b.body(Full::new(body.clone()))
                .map_err(|e| StoreError::invalid(format!("request {method} {target}: {e}")))
        };
        if let Some(mut sender) = self.take_idle() {
            match sender.send_request(build()?).await {
                Ok(resp) => return self.finish(sender, resp).await,
                Err(e) if e.is_canceled() || e.is_incomplete_message() => {}
                Err(e) => return Err(self.unreachable(e)),
            }
        }
        let mut sender = self.dial().await?;
        let resp = sender
            .send_request(build()?)
            .await
            .map_err(|e| self.unreachable(e))?;
        self.finish(sender, resp).await
    }

    async fn finish(
        &self,
        sender: Sender,
        resp: hyper::Response<hyper::body::Incoming>,
    ) -> StoreResult<Response> {
        let status = resp.status().as_u16();
        let (parts, body) = resp.into_parts();
        let body = body
            .collect()
            .await
            .map_err(|e| self.unreachable(e))?
            .to_bytes();
        if !sender.is_closed() {
            self.idle.lock().unwrap().push(sender);
        }
        Ok(Response {
            status,
            headers: parts.headers,
            body,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::Endpoint;

    #[test]
    fn endpoints() {
        let e = Endpoint::parse("http://127.0.0.1:8333").unwrap();
        assert_eq!(
            (e.tls, e.port, e.authority()),
            (false, 8333, "127.0.0.1:8333".into())
        );
        let e = Endpoint::parse("https://s3.eu-west-1.amazonaws.com/").unwrap();
        assert_eq!(
            (e.port, e.authority()),
            (443, "s3.eu-west-1.amazonaws.com".into())
        );
        assert_eq!(e.to_string(), "https://s3.eu-west-1.amazonaws.com");
        for bad in ["ftp://h", "h:1", "http://h/path", "http://h:0"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        let e = Endpoint::parse("http://u:hunter2@h").unwrap_err();
        assert!(!e.contains("hunter2"), "{e}");
    }
}
