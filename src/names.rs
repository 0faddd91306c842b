//! What a lock name, namespace and token may look like.
//!
//! Names end up in Redis keys, etcd keys, ZooKeeper paths and file names, so one conservative
//! alphabet keeps every store safe without per-store escaping rules leaking into the contract.

/// Longest lock name, in bytes: far more than any real name, short enough for every store's keys.
pub const MAX_NAME: usize = 200;

/// `example` is a valid one of this kind, for the message about an empty one.
fn check(kind: &str, s: &str, extra: &str, example: &str) -> Result<(), String> {
    if s.is_empty() {
        return Err(format!("the {kind} is empty; give e.g. {example}"));
    }
    if s.len() > MAX_NAME {
        return Err(format!(
            "the {kind} is {} bytes long; the most is {MAX_NAME}",
            s.len()
        ));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "._-@+=".contains(*c) || extra.contains(*c)))
    {
        return Err(format!(
            "the {kind} has the character {c:?}; use letters, digits and . _ - @ + ={}",
            extra.chars().map(|c| format!(" {c}")).collect::<String>()
        ));
    }
    // Only kinds that may hold `/` are told of its rules.
    let slash = extra.contains('/');
    if s.starts_with(['.', '-']) || (slash && (s.starts_with('/') || s.ends_with('/'))) {
        return Err(match slash {
            true => {
                format!("the {kind} {s:?} may not start with . / or -, end with /, or contain //")
            }
            false => format!("the {kind} {s:?} may not start with . or -"),
        });
    }
    if s.contains("//") {
        return Err(format!("the {kind} {s:?} may not contain //"));
    }
    Ok(())
}

/// A lock name: letters, digits, `._-@+=:/`, 1 to 200 bytes, no path tricks.
pub fn parse_name(s: &str) -> Result<String, String> {
    check("lock name", s, ":/", "nightly-backup")?;
    if s.split('/').any(|part| part == "..") {
        return Err(format!("the lock name {s:?} may not contain a .. segment"));
    }
    Ok(s.to_string())
}

/// A namespace: like a name, without `:` and `/` (they separate it from the name in keys).
pub fn parse_namespace(s: &str) -> Result<String, String> {
    check(
        "namespace",
        s,
        "",
        "team-a (or leave --namespace out for the default)",
    )?;
    Ok(s.to_string())
}

/// A `list` prefix: empty (everything) or the start of a valid name.
pub fn parse_prefix(s: &str) -> Result<String, String> {
    if s.is_empty() {
        return Ok(String::new());
    }
    check("prefix", s.trim_end_matches('/'), ":/", "deploy/")?;
    Ok(s.to_string())
}

/// A token as `lock` prints it: 32 lowercase hex digits (128 random bits).
pub fn parse_token(s: &str) -> Result<String, String> {
    let s = s.trim();
    if s.len() == 32 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        Ok(s.to_ascii_lowercase())
    } else {
        Err("a token is the 32 hex digits `dlock lock` printed".into())
    }
}

/// A fresh owner token: 128 bits from the OS's random source.
pub fn new_token() -> String {
    format!("{:032x}", crate::sys::random_u128())
}

/// The first hex digits of a token: enough to tell holders apart in `inspect` without handing
/// out the token itself (which would let any reader release the lock).
pub fn owner_id(token: &str) -> String {
    token.chars().take(8).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_names_pass() {
        for n in [
            "deploy",
            "db-migrate",
            "team/prod/deploy",
            "a:b",
            "x@host+1=2",
            "A.b_c",
        ] {
            assert_eq!(parse_name(n).as_deref(), Ok(n));
        }
    }

    #[test]
    fn hostile_names_are_refused() {
        let long = "a".repeat(MAX_NAME + 1);
        for n in [
            "", "../x", "a/../b", "/abs", ".hidden", "-flag", "a//b", "a/", "sp ace", "tab\t",
            "nl\n", "ünï", "a*b", "{tag}", &long,
        ] {
            assert!(parse_name(n).is_err(), "{n:?} was accepted");
        }
    }

    #[test]
    fn namespaces_have_no_separators() {
        assert!(parse_namespace("team-a").is_ok());
        assert!(parse_namespace("a:b").is_err());
        assert!(parse_namespace("a/b").is_err());
    }

    #[test]
    fn tokens_are_128_bit_hex() {
        let t = new_token();
        assert_eq!(parse_token(&t), Ok(t.clone()));
        assert_ne!(t, new_token());
        assert!(parse_token("xyz").is_err());
        assert!(parse_token(&"g".repeat(32)).is_err());
    }
}
