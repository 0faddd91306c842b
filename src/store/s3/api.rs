//! The few S3 requests the store makes, and what their answers mean to dlock: GET and
//! conditional PUT of one object, a listing, and the bucket's existence and creation.

use bytes::Bytes;

use async_trait::async_trait;

use crate::store::aws::records::{Cond, Object, Objects};
use crate::store::aws::sigv4::uri_encode;
use crate::store::aws::{self, Response, Service};
use crate::store::{Health, HealthQuery, StoreError, StoreResult};

/// One bucket, addressed path-style (`/BUCKET/KEY`) or virtual-hosted (`BUCKET.host/KEY`).
pub struct Bucket {
    pub svc: Service,
    pub name: String,
    /// `/BUCKET` path-style, "" virtual-hosted: what goes before every key's path.
    pub root: String,
}

/// What a missing bucket's error says, after its name.
pub const MISSING: &str = "does not exist: create it, or add ?create=1 to the store URL";

impl Bucket {
    fn path(&self, key: &str) -> String {
        format!("{}/{}", self.root, uri_encode(key, true))
    }

    /// Whether the bucket exists, by a GET of `key` (present or not): a GET's refusal
    /// names its cause (a refused signature, an unknown key), where a HEAD's has no body.
    pub async fn exists(&self, key: &str) -> StoreResult<bool> {
        match self.get(key).await {
            Ok(_) => Ok(true),
            Err(e)
                if e.kind() == crate::store::ErrorKind::Config && e.message().contains(MISSING) =>
            {
                Ok(false)
            }
            Err(e) => Err(e),
        }
    }

    /// Create the bucket (`?create=1`); one that is already this account's is fine.
    pub async fn create(&self) -> StoreResult<()> {
        let body = match self.svc.region.as_str() {
            "us-east-1" => Vec::new(),
            region => format!(
                "<CreateBucketConfiguration><LocationConstraint>{region}\
                 </LocationConstraint></CreateBucketConfiguration>"
            )
            .into_bytes(),
        };
        let path = format!("{}/", self.root);
        let r = self
            .svc
            .send("PUT", &path, "", &[], Bytes::from(body))
            .await?;
        match (r.status, aws::error_code(&r.body).0.as_str()) {
            (200, _) | (409, "BucketAlreadyOwnedByYou") => Ok(()),
            _ => Err(self.failure(&r)),
        }
    }

    /// What an answer dlock did not expect means, as the exit codes tell it.
    pub fn failure(&self, r: &Response) -> StoreError {
        let (code, message) = aws::error_code(&r.body);
        let said = format!("{} {code}: {message}", r.status);
        let bucket = &self.name;
        match (r.status, code.as_str()) {
            (404, "NoSuchBucket") => StoreError::config(format!("bucket {bucket} {MISSING}")),
            (403, "SignatureDoesNotMatch") => StoreError::refused(
                "S3 refused the signature (SignatureDoesNotMatch): check the secret key \
                 (AWS_SECRET_ACCESS_KEY or the profile's)",
            ),
            (403, "InvalidAccessKeyId") => StoreError::refused(format!(
                "S3 does not know the access key {} (InvalidAccessKeyId)",
                self.svc.creds.access_key
            )),
            (403, "RequestTimeTooSkewed") => StoreError::config(
                "S3 refused the request: this host's clock is too far from S3's \
                 (RequestTimeTooSkewed); set the clock right",
            ),
            (403, _) => {
                StoreError::refused(format!("S3 refused access to bucket {bucket} ({said})"))
            }
            (301, _) | (400, "AuthorizationHeaderMalformed") => StoreError::config(format!(
                "bucket {bucket} is not in region {} ({said}): give its region with ?region=",
                self.svc.region
            )),
            (500.., _) => StoreError::unavailable(format!("S3 answered {said}")),
            _ => StoreError::protocol(format!("S3 answered {said}")),
        }
    }
}

#[async_trait]
impl Objects for Bucket {
    /// The object at `key`, or its absence, with the server's `Date`.
    async fn get(&self, key: &str) -> StoreResult<Object> {
        let r = self
            .svc
            .send("GET", &self.path(key), "", &[], Bytes::new())
            .await?;
        let date_ms = aws::date_ms(&r)?;
        match r.status {
            200 => {
                let etag = r
                    .header("etag")
                    .ok_or_else(|| StoreError::protocol("S3 answered a GET without an ETag"))?
                    .to_string();
                Ok(Object {
                    body: Some((r.body, etag)),
                    date_ms,
                })
            }
            404 if aws::error_code(&r.body).0 != "NoSuchBucket" => Ok(Object {
                body: None,
                date_ms,
            }),
            _ => Err(self.failure(&r)),
        }
    }

    /// Write `body` at `key` if `cond` holds: `Ok(Some(etag))` written; `Ok(None)` the
    /// condition failed. AWS answers a lost race with 412, a concurrent conflicting write with 409
    /// (ConditionalRequestConflict), an `If-Match` on a vanished key with 404: each is "not
    /// written, read again", never success.
    async fn put(&self, key: &str, body: Vec<u8>, cond: Cond<'_>) -> StoreResult<Option<String>> {
        let header = match cond {
            Cond::Absent => ("if-none-match", "*"),
            Cond::Match(etag) => ("if-match", etag),
        };
        let extra = [("content-type", "application/json"), header];
        let r = self
            .svc
            .send("PUT", &self.path(key), "", &extra, Bytes::from(body))
            .await?;
        match r.status {
            200 => Ok(Some(r.header("etag").unwrap_or_default().to_string())),
            409 | 412 => Ok(None),
            404 if aws::error_code(&r.body).0 != "NoSuchBucket" => Ok(None),
            _ => Err(self.failure(&r)),
        }
    }

    /// Every key under `prefix` (ListObjectsV2, page by page).
    async fn list(&self, prefix: &str) -> StoreResult<Vec<String>> {
        let mut keys = Vec::new();
        let mut next: Option<String> = None;
        loop {
            let mut query = format!("list-type=2&prefix={}", uri_encode(prefix, false));
            if let Some(token) = &next {
                query.push_str(&format!("&continuation-token={}", uri_encode(token, false)));
            }
            let path = format!("{}/", self.root);
            let r = self
                .svc
                .send("GET", &path, &query, &[], Bytes::new())
                .await?;
            if r.status != 200 {
                return Err(self.failure(&r));
            }
            let text = String::from_utf8_lossy(&r.body);
            keys.extend(tags(&text, "Key").map(unescape));
            next = tags(&text, "NextContinuationToken").next().map(unescape);
            if next.is_none() || !text.contains("<IsTruncated>true</IsTruncated>") {
                return Ok(keys);
            }
        }
    }

    async fn health(&self, probe: &str, query: HealthQuery) -> StoreResult<Health> {
        super::doctor::health(self, probe, query).await
    }
}

/// The texts of every `<tag>...</tag>` in `xml`.
fn tags<'a>(xml: &'a str, tag: &str) -> std::vec::IntoIter<&'a str> {
    let open = format!("<{tag}>");
    let close = format!("</{tag}>");
    let found: Vec<&str> = xml
        .split(open.as_str())
        .skip(1)
        .filter_map(|part| part.split_once(close.as_str()).map(|(v, _)| v))
        .collect();
    found.into_iter()
}

fn unescape(text: &str) -> String {
    text.replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&apos;", "'")
        .replace("&amp;", "&")
}

#[cfg(test)]
mod tests {
    #[test]
    fn listing_keys_are_read_from_the_xml() {
        let xml = "<ListBucketResult><Contents><Key>a/x</Key></Contents>\
                   <Contents><Key>a/y&amp;z</Key></Contents></ListBucketResult>";
        let keys: Vec<String> = super::tags(xml, "Key").map(super::unescape).collect();
        assert_eq!(keys, vec!["a/x", "a/y&z"]);
    }
}
