//! AWS Signature Version 4 (header-based), as AWS's "Signature Version 4 signing process"
//! describes it: a canonical request, a string to sign, a signing key derived from the secret
//! by four HMAC-SHA256 steps, and the `Authorization` header.
//!
//! A pure function of the request and the time: the caller adds `host`, `x-amz-date` and
//! (for S3) `x-amz-content-sha256` to the headers it passes, and sends exactly those.

use hmac::{Hmac, KeyInit, Mac};
use sha2_011::{Digest, Sha256};

use crate::store::server::percent_decode;

/// What one request signs.
pub struct Request<'a> {
    pub method: &'a str,
    /// The path as sent on the wire, already percent-encoded (`encode_path` for S3 keys).
    pub path: &'a str,
    /// The query as sent (`a=1&b=2`), in any order; "" for none.
    pub query: &'a str,
    /// Every header to sign, in any order and case; each is sent as given.
    pub headers: &'a [(String, String)],
    /// The hex SHA-256 of the body.
    pub payload_hash: &'a str,
    /// `YYYYMMDDTHHMMSSZ`, as the `x-amz-date` header says.
    pub amz_date: &'a str,
    pub region: &'a str,
    pub service: &'a str,
}

/// The hex SHA-256 of `bytes` (the payload hash; that of an empty body for a GET).
pub fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn hmac(key: &[u8], data: &str) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(data.as_bytes());
    mac.finalize().into_bytes().to_vec()
}

/// SigV4's URI encoding: every byte but the unreserved characters (`A-Z a-z 0-9 - _ . ~`) as
/// `%XX` in upper-case hex; `/` too unless `keep_slash` (an S3 object key's path).
pub fn uri_encode(text: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for b in text.bytes() {
        let plain = b.is_ascii_alphanumeric() || b"-_.~".contains(&b) || (keep_slash && b == b'/');
        if plain {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The canonical query: each name and value decoded, encoded again the one SigV4 way, and
/// sorted (a name without `=` has an empty value).
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(String, String)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            let norm = |s: &str| uri_encode(&percent_decode(s).unwrap_or_else(|_| s.into()), false);
            (norm(k), norm(v))
        })
        .collect();
    pairs.sort();
    let joined: Vec<String> = pairs.iter().map(|(k, v)| format!("{k}={v}")).collect();
    joined.join("&")
}

/// The canonical headers block and the signed-header list: names in lower case and sorted,
/// values trimmed with inner runs of spaces folded to one, a repeated name's values joined
/// by commas.
fn canonical_headers(headers: &[(String, String)]) -> (String, String) {
    let mut named: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| {
            let v = v.split_whitespace().collect::<Vec<_>>().join(" ");
            (k.to_ascii_lowercase(), v)
        })
        .collect();
    // Stable: a repeated name keeps its values in the order given.
    named.sort_by(|a, b| a.0.cmp(&b.0));
    let mut block = String::new();
    let mut names: Vec<&str> = Vec::new();
    for (k, v) in &named {
        if names.last() == Some(&k.as_str()) {
            block.pop();
            block.push_str(&format!(",{v}\n"));
        } else {
            block.push_str(&format!("{k}:{v}\n"));
            names.push(k);
        }
    }
    (block, names.join(";"))
}

/// The canonical request and its signed-header list. S3 signs the path as sent; every other
/// service encodes it once more.
pub fn canonical_request(r: &Request) -> (String, String) {
    let path = if r.service == "s3" {
        r.path.to_string()
    } else {
        uri_encode(r.path, true)
    };
    let (headers, signed) = canonical_headers(r.headers);
    let text = format!(
        "{}\n{path}\n{}\n{headers}\n{signed}\n{}",
        r.method,
        canonical_query(r.query),
        r.payload_hash
    );
    (text, signed)
}

/// The `Authorization` header's value for `r`, signed with this key pair.
pub fn authorization(r: &Request, access_key: &str, secret_key: &str) -> String {
    let (canonical, signed) = canonical_request(r);
    let day = &r.amz_date[..8.min(r.amz_date.len())];
    let scope = format!("{day}/{}/{}/aws4_request", r.region, r.service);
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{}\n{scope}\n{}",
        r.amz_date,
        sha256_hex(canonical.as_bytes())
    );
    let mut key = hmac(format!("AWS4{secret_key}").as_bytes(), day);
    for part in [r.region, r.service, "aws4_request"] {
        key = hmac(&key, part);
    }
    let signature = hex(&hmac(&key, &to_sign));
    format!(
        "AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, \
         Signature={signature}"
    )
}

/// `x-amz-date` for a time: `YYYYMMDDTHHMMSSZ` in UTC.
pub fn amz_date(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(t)
        .to_string()
        .replace(['-', ':'], "")
}

#[cfg(test)]
mod tests {
    //! Published vectors, each checked in full (the whole `Authorization` value):
    //! - AWS's SigV4 test suite (2015 edition, as shipped in AWS's `aws-sig-v4-test-suite`,
    //!   e.g. in smithy-rs's aws-sigv4 test data): `get-vanilla`,
    //!   `get-vanilla-query-order-key-case`, `post-vanilla`;
    //! - the 2011 edition of the same suite (botocore's `tests/unit/auth/aws4_testsuite`):
    //!   `get-space` and `get-utf8`, whose paths are encoded twice (every service but S3);
    //! - the S3 API reference's worked examples ("Signature Calculations for the Authorization
    //!   Header: Transferring Payload in a Single Chunk"): GET Object with a range, and PUT
    //!   Object with a key that needs escaping.
    use super::*;

    const SUITE_KEY: &str = "AKIDEXAMPLE";
    const SUITE_SECRET: &str = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
    const S3_KEY: &str = "AKIAIOSFODNN7EXAMPLE";
    const S3_SECRET: &str = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    const EMPTY: &str = "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    fn headers(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// One vector of the 2015 suite: service `service`, us-east-1, 2015-08-30T12:36:00Z.
    fn suite_2015(method: &str, query: &str) -> String {
        let h = headers(&[
            ("Host", "example.amazonaws.com"),
            ("X-Amz-Date", "20150830T123600Z"),
        ]);
        let r = Request {
            method,
            path: "/",
            query,
            headers: &h,
            payload_hash: EMPTY,
            amz_date: "20150830T123600Z",
            region: "us-east-1",
            service: "service",
        };
        authorization(&r, SUITE_KEY, SUITE_SECRET)
    }

    fn suite_2015_authz(signature: &str) -> String {
        format!(
            "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, \
             SignedHeaders=host;x-amz-date, Signature={signature}"
        )
    }

    #[test]
    fn the_2015_suite() {
        assert_eq!(
            suite_2015("GET", ""),
            suite_2015_authz("5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31")
        );
        assert_eq!(
            suite_2015("GET", "Param2=value2&Param1=value1"),
            suite_2015_authz("b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500")
        );
        assert_eq!(
            suite_2015("POST", ""),
            suite_2015_authz("5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b")
        );
    }

    /// The 2011 suite signs a `date` header instead of `x-amz-date`, for service `host`.
    fn suite_2011(path: &str) -> (String, String) {
        let h = headers(&[
            ("date", "Mon, 09 Sep 2011 23:36:00 GMT"),
            ("host", "host.foo.com"),
        ]);
        let r = Request {
            method: "GET",
            path,
            query: "",
            headers: &h,
            payload_hash: EMPTY,
            amz_date: "20110909T233600Z",
            region: "us-east-1",
            service: "host",
        };
        (
            canonical_request(&r).0,
            authorization(&r, SUITE_KEY, SUITE_SECRET),
        )
    }

    #[test]
    fn the_2011_suite_encodes_paths_twice() {
        let authz = |sig: &str| {
            format!(
                "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20110909/us-east-1/host/aws4_request, \
                 SignedHeaders=date;host, Signature={sig}"
            )
        };
        let (creq, got) = suite_2011("/%20/foo");
        assert_eq!(
            creq,
            format!(
                "GET\n/%2520/foo\n\ndate:Mon, 09 Sep 2011 23:36:00 GMT\nhost:host.foo.com\n\n\
                 date;host\n{EMPTY}"
            )
        );
        assert_eq!(
            got,
            authz("2be9e587d1ee1f0fd02128724b86b4358ba3630d39f493b6e06610a19a50779e")
        );
        let (_, got) = suite_2011(&uri_encode("/\u{1234}", true));
        assert_eq!(
            got,
            authz("57b1eb3df3b16a8479c0097b66c0b261cfd65b829419a3f2c3d05319722490b8")
        );
    }

    #[test]
    fn the_s3_reference_examples() {
        let h = headers(&[
            ("Host", "examplebucket.s3.amazonaws.com"),
            ("Range", "bytes=0-9"),
            ("x-amz-content-sha256", EMPTY),
            ("x-amz-date", "20130524T000000Z"),
        ]);
        let get = Request {
            method: "GET",
            path: "/test.txt",
            query: "",
            headers: &h,
            payload_hash: EMPTY,
            amz_date: "20130524T000000Z",
            region: "us-east-1",
            service: "s3",
        };
        assert_eq!(
            authorization(&get, S3_KEY, S3_SECRET),
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
        let body = sha256_hex(b"Welcome to Amazon S3.");
        assert_eq!(
            body,
            "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072"
        );
        let h = headers(&[
            ("Date", "Fri, 24 May 2013 00:00:00 GMT"),
            ("Host", "examplebucket.s3.amazonaws.com"),
            ("x-amz-content-sha256", &body),
            ("x-amz-date", "20130524T000000Z"),
            ("x-amz-storage-class", "REDUCED_REDUNDANCY"),
        ]);
        let path = uri_encode("/test$file.text", true);
        let put = Request {
            method: "PUT",
            path: &path,
            headers: &h,
            payload_hash: &body,
            ..get
        };
        assert!(authorization(&put, S3_KEY, S3_SECRET).ends_with(
            "SignedHeaders=date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class, \
                 Signature=98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd"
        ));
    }

    #[test]
    fn encoding_and_dates() {
        assert_eq!(uri_encode("a b/c~*", false), "a%20b%2Fc~%2A");
        assert_eq!(uri_encode("a b/c", true), "a%20b/c");
        assert_eq!(
            canonical_query("b=2&a=x%20y&lifecycle"),
            "a=x%20y&b=2&lifecycle="
        );
        let t = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_440_938_160);
        assert_eq!(amz_date(t), "20150830T123600Z");
    }
}
