//! What the AWS-protocol stores (S3, and DynamoDB next) share: credentials and region from the
//! standard environment (`creds`), a SigV4 signer of dlock's own (`sigv4`, tested against AWS's
//! published vectors), and a small HTTP/1.1 client over hyper and rustls (`http`). No AWS SDK:
//! those bring a second TLS stack and several megabytes (see the README's S3 section).

pub mod creds;
pub mod http;
pub mod records;
pub mod sigv4;

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

use crate::store::server::ServerUrl;
use crate::store::{StoreError, StoreResult};
pub use creds::Credentials;
pub use http::{Endpoint, Response};

/// Signed requests to one AWS service at one endpoint.
pub struct Service {
    pub client: http::Client,
    pub creds: Credentials,
    pub region: String,
    /// The signing name: `s3`, `dynamodb`.
    pub service: &'static str,
}

impl Service {
    pub fn new(
        endpoint: Endpoint,
        tls: Option<Arc<rustls::ClientConfig>>,
        creds: Credentials,
        region: String,
        service: &'static str,
    ) -> Service {
        Service {
            client: http::Client::new(endpoint, tls),
            creds,
            region,
            service,
        }
    }

    /// Sign and send one request: `path` as sent (percent-encoded), `query` without its `?`.
    /// `x-amz-content-sha256` goes with every request: S3 requires it, others ignore it.
    pub async fn send(
        &self,
        method: &str,
        path: &str,
        query: &str,
        extra: &[(&str, &str)],
        body: Bytes,
    ) -> StoreResult<Response> {
        let payload_hash = sigv4::sha256_hex(&body);
        let amz_date = sigv4::amz_date(SystemTime::now());
        let mut headers: Vec<(String, String)> = vec![
            ("host".into(), self.client.endpoint.authority()),
            ("x-amz-date".into(), amz_date.clone()),
            ("x-amz-content-sha256".into(), payload_hash.clone()),
        ];
        if let Some(token) = &self.creds.session_token {
            headers.push(("x-amz-security-token".into(), token.clone()));
        }
        headers.extend(extra.iter().map(|(k, v)| (k.to_string(), v.to_string())));
        let authorization = sigv4::authorization(
            &sigv4::Request {
                method,
                path,
                query,
                headers: &headers,
                payload_hash: &payload_hash,
                amz_date: &amz_date,
                region: &self.region,
                service: self.service,
            },
            &self.creds.access_key,
            &self.creds.secret_key,
        );
        headers.push(("authorization".into(), authorization));
        headers.push(("content-length".into(), body.len().to_string()));
        let target = if query.is_empty() {
            path.to_string()
        } else {
            format!("{path}?{query}")
        };
        self.client.send(method, &target, &headers, body).await
    }
}

/// What an AWS store's URL says beyond its bucket or table: `region`, `endpoint`, `create`
/// and `ca_file` (the caller takes its own parameters first).
pub struct Options {
    pub region: String,
    pub endpoint: Endpoint,
    pub create: bool,
    pub ca_file: Option<String>,
}

/// A yes/no URL parameter: `key=1` (or `true`, or bare), absent or `0` for no.
pub fn flag(url: &mut ServerUrl, key: &str) -> StoreResult<bool> {
    match url.take_param(key).as_deref() {
        None | Some("0") | Some("false") => Ok(false),
        Some("1") | Some("true") | Some("") => Ok(true),
        Some(other) => Err(StoreError::invalid(format!(
            "{key}={other:?}: use {key}=1 or leave it out"
        ))),
    }
}

impl Options {
    /// `default_host`: the service's AWS endpoint host for a region (over https).
    pub fn take(
        url: &mut ServerUrl,
        env: creds::Env,
        default_host: impl Fn(&str) -> String,
    ) -> StoreResult<Options> {
        let region = creds::region(url.take_param("region"), env)?;
        let endpoint = match url.take_param("endpoint") {
            Some(e) => Endpoint::parse(&e).map_err(StoreError::invalid)?,
            None => Endpoint {
                tls: true,
                host: default_host(&region),
                port: 443,
            },
        };
        let create = flag(url, "create")?;
        let ca_file = url.take_param("ca_file");
        url.reject_unknown_params().map_err(StoreError::invalid)?;
        if ca_file.is_some() && !endpoint.tls {
            return Err(StoreError::invalid("ca_file needs an https:// endpoint"));
        }
        Ok(Options {
            region,
            endpoint,
            create,
            ca_file,
        })
    }

    /// The TLS configuration for an `https` endpoint, none for `http`.
    pub fn tls(&self) -> StoreResult<Option<Arc<rustls::ClientConfig>>> {
        match self.endpoint.tls {
            true => Ok(Some(tls_config(self.ca_file.as_deref())?)),
            false => Ok(None),
        }
    }
}

/// The server's clock from a response's `Date` (whole seconds), in ms since the epoch.
pub fn date_ms(r: &Response) -> StoreResult<i64> {
    let text = r
        .header("date")
        .ok_or_else(|| StoreError::protocol("the answer has no Date header"))?;
    let t = httpdate::parse_http_date(text)
        .map_err(|_| StoreError::protocol(format!("unreadable Date header {text:?}")))?;
    Ok(t.duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64))
}

/// An error answer's `<Code>` and `<Message>` (S3's XML; empty where absent), printable.
pub fn error_code(body: &[u8]) -> (String, String) {
    let text = String::from_utf8_lossy(body);
    let field = |tag: &str| {
        let open = format!("<{tag}>");
        let close = format!("</{tag}>");
        text.split_once(open.as_str())
            .and_then(|(_, rest)| rest.split_once(close.as_str()))
            .map(|(v, _)| v.chars().filter(|c| !c.is_control()).take(200).collect())
            .unwrap_or_default()
    };
    (field("Code"), field("Message"))
}

/// The system's trusted roots, or the PEM file `?ca_file=` names, as a rustls client
/// configuration for an `https` endpoint.
pub fn tls_config(ca_file: Option<&str>) -> StoreResult<Arc<rustls::ClientConfig>> {
    crate::store::tls::install_provider();
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        None => roots.roots = crate::store::tls::system_roots()?,
        Some(path) => {
            use rustls::pki_types::CertificateDer;
            use rustls::pki_types::pem::PemObject;
            let pem = std::fs::read(path)
                .map_err(|e| StoreError::invalid(format!("cannot read {path}: {e}")))?;
            for cert in CertificateDer::pem_slice_iter(&pem) {
                let cert = cert.map_err(|e| StoreError::invalid(format!("ca_file: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| StoreError::invalid(format!("ca_file: {e}")))?;
            }
        }
    }
    let config = rustls::ClientConfig::builder()
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(Arc::new(config))
}

#[cfg(test)]
mod tests {
    #[test]
    fn error_codes_are_read_from_the_xml() {
        let body = b"<?xml version=\"1.0\"?><Error><Code>SignatureDoesNotMatch</Code>\
                     <Message>The request signature we calculated does not match</Message></Error>";
        let (code, message) = super::error_code(body);
        assert_eq!(code, "SignatureDoesNotMatch");
        assert!(message.starts_with("The request signature"));
        assert_eq!(super::error_code(b"").0, "");
    }
}
