//! AWS credentials and region, from where every AWS tool reads them: `AWS_ACCESS_KEY_ID`,
//! `AWS_SECRET_ACCESS_KEY` and `AWS_SESSION_TOKEN`; else the profile `AWS_PROFILE` (default
//! `default`) of the shared credentials file (`AWS_SHARED_CREDENTIALS_FILE`, default
//! `~/.aws/credentials`). The region: the URL's, else `AWS_REGION`, else `AWS_DEFAULT_REGION`.
//! Users of SSO or instance roles export theirs (`aws configure export-credentials --format
//! env`). The secret and the token never appear in any message: `Debug` hides them.

use std::fmt;

use crate::store::{StoreError, StoreResult};

/// A key pair, and the session token that goes with temporary keys.
#[derive(Clone)]
pub struct Credentials {
    pub access_key: String,
    pub secret_key: String,
    pub session_token: Option<String>,
    /// Where they came from, for `doctor` ("the environment", "profile default of ...").
    pub source: String,
}

impl fmt::Debug for Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Credentials({} from {}, secret ***)",
            self.access_key, self.source
        )
    }
}

/// How the environment is read (a closure, so tests need not set the process's own).
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

fn var(env: Env, key: &str) -> Option<String> {
    env(key).filter(|v| !v.is_empty())
}

/// The credentials the environment or the shared credentials file gives.
pub fn credentials(env: Env) -> StoreResult<Credentials> {
    if let Some(access_key) = var(env, "AWS_ACCESS_KEY_ID") {
        let secret_key = var(env, "AWS_SECRET_ACCESS_KEY").ok_or_else(|| {
            StoreError::config("AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not")
        })?;
        return Ok(Credentials {
            access_key,
            secret_key,
            session_token: var(env, "AWS_SESSION_TOKEN"),
            source: "the environment (AWS_ACCESS_KEY_ID)".into(),
        });
    }
    let profile = var(env, "AWS_PROFILE").unwrap_or_else(|| "default".into());
    let file = var(env, "AWS_SHARED_CREDENTIALS_FILE")
        .or_else(|| var(env, "HOME").map(|h| format!("{h}/.aws/credentials")))
        .ok_or_else(|| StoreError::config(NONE))?;
    let text = match std::fs::read_to_string(&file) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::config(NONE));
        }
        Err(e) => return Err(StoreError::config(format!("cannot read {file}: {e}"))),
    };
    let keys = profile_keys(&text, &profile);
    let get = |k: &str| keys.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone());
    match (get("aws_access_key_id"), get("aws_secret_access_key")) {
        (Some(access_key), Some(secret_key)) => Ok(Credentials {
            access_key,
            secret_key,
            session_token: get("aws_session_token"),
            source: format!("profile {profile} of {file}"),
        }),
        _ => Err(StoreError::config(format!(
            "no aws_access_key_id and aws_secret_access_key for profile {profile:?} in {file}"
        ))),
    }
}

const NONE: &str = "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or \
                    a profile in ~/.aws/credentials (AWS_PROFILE, AWS_SHARED_CREDENTIALS_FILE)";

/// The `key = value` lines of one `[profile]` section of an INI file.
fn profile_keys(text: &str, profile: &str) -> Vec<(String, String)> {
    let mut inside = false;
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.starts_with('#') || line.starts_with(';') || line.is_empty() {
            continue;
        }
        if let Some(section) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            inside = section.trim() == profile;
        } else if inside && let Some((k, v)) = line.split_once('=') {
            out.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
        }
    }
    out
}

/// The region: the URL's, else `AWS_REGION`, else `AWS_DEFAULT_REGION`.
pub fn region(given: Option<String>, env: Env) -> StoreResult<String> {
    given
        .filter(|r| !r.is_empty())
        .or_else(|| var(env, "AWS_REGION"))
        .or_else(|| var(env, "AWS_DEFAULT_REGION"))
        .ok_or_else(|| {
            StoreError::invalid("no region: add ?region=R to the URL, or set AWS_REGION")
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env_of(pairs: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| {
            pairs
                .iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    }

    #[test]
    fn the_environment_comes_first_and_debug_hides_the_secret() {
        let env = env_of(&[
            ("AWS_ACCESS_KEY_ID", "AK"),
            ("AWS_SECRET_ACCESS_KEY", "hunter2"),
            ("AWS_SESSION_TOKEN", "tok"),
            ("AWS_PROFILE", "other"),
        ]);
        let c = credentials(&env).unwrap();
        assert_eq!(
            (c.secret_key.as_str(), c.session_token.as_deref()),
            ("hunter2", Some("tok"))
        );
        let shown = format!("{c:?}");
        assert!(
            !shown.contains("hunter2") && !shown.contains("tok"),
            "{shown}"
        );
        let half = env_of(&[("AWS_ACCESS_KEY_ID", "AK")]);
        assert!(credentials(&half).is_err());
    }

    #[test]
    fn a_profile_of_the_shared_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("credentials");
        std::fs::write(
            &file,
            "[default]\naws_access_key_id = D\naws_secret_access_key = dsecret\n\n\
             # a comment\n[ci]\naws_access_key_id=C\naws_secret_access_key=csecret\n\
             aws_session_token = ctok\n",
        )
        .unwrap();
        let path: &'static str = Box::leak(file.display().to_string().into_boxed_str());
        let pairs: &'static [(&str, &str)] = Box::leak(Box::new([
            ("AWS_SHARED_CREDENTIALS_FILE", path),
            ("AWS_PROFILE", "ci"),
        ]));
        let c = credentials(&env_of(pairs)).unwrap();
        assert_eq!(
            (
                c.access_key.as_str(),
                c.secret_key.as_str(),
                c.session_token.as_deref()
            ),
            ("C", "csecret", Some("ctok"))
        );
        let pairs: &'static [(&str, &str)] =
            Box::leak(Box::new([("AWS_SHARED_CREDENTIALS_FILE", path)]));
        assert_eq!(credentials(&env_of(pairs)).unwrap().access_key, "D");
        let pairs: &'static [(&str, &str)] = Box::leak(Box::new([
            ("AWS_SHARED_CREDENTIALS_FILE", path),
            ("AWS_PROFILE", "nope"),
        ]));
        let e = credentials(&env_of(pairs)).unwrap_err();
        assert!(e.message().contains("nope"), "{e}");
    }

    #[test]
    fn the_region() {
        let env = env_of(&[("AWS_DEFAULT_REGION", "eu-west-1")]);
        assert_eq!(region(Some("us-east-2".into()), &env).unwrap(), "us-east-2");
        assert_eq!(region(None, &env).unwrap(), "eu-west-1");
        assert!(region(None, &env_of(&[])).is_err());
    }
}
