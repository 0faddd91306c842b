//! What the AWS-protocol stores (S3, and DynamoDB next) share: credentials and region from the
//! standard environment (`creds`), a SigV4 signer of dlock's own (`sigv4`, tested against AWS's
//! published vectors), and a small HTTP/1.1 client over hyper and rustls (`http`). No AWS SDK:
//! those bring a second TLS stack and several megabytes (see the README's S3 section).

pub mod creds;
pub mod http;
pub mod sigv4;

use std::sync::Arc;
use std::time::SystemTime;

use bytes::Bytes;

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
