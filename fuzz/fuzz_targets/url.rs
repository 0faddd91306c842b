//! Store URLs come from flags and the environment: any string parses or is refused with a
//! message, never a panic; what parses prints without its password, and what it prints
//! parses again to the same store. Nothing here names a kind of store: every kind the
//! registry lists is covered as it is added.
#![no_main]

use dlock::store::kind::Location;
use dlock::store::registry;
use dlock::store::url::{StoreUrl, parse_with_env, split_list};
use libfuzzer_sys::fuzz_target;

/// No environment: the run must not depend on this machine's variables.
fn parse(s: &str) -> Result<StoreUrl, String> {
    parse_with_env(s, &|_| None)
}

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match parse(s) {
        Ok(url) => {
            // The kind a URL parsed as is the one the registry lists for its scheme.
            let kind = registry::by_scheme(url.scheme()).map(|(k, _)| k);
            assert_eq!(kind, Some(url.kind), "{s:?}");
            let shown = url.to_string();
            // Whatever the kind: every server URL has the same parts (`store::server`).
            let server = match &url.at {
                Location::Dir { .. } => None,
                Location::Server(u) => Some(u),
            };
            if let Some(u) = server {
                if let Some(p) = &u.password {
                    assert!(
                        !shown.contains(&format!(":{p}@")),
                        "{s:?} shows its password: {shown:?}"
                    );
                }
                let again = parse(&shown)
                    .unwrap_or_else(|e| panic!("{s:?} parsed, its display {shown:?} not: {e}"));
                assert_eq!(again.to_string(), shown, "{s:?}");
            }
        }
        Err(msg) => assert!(!msg.is_empty() && !msg.contains('\n'), "{s:?}: {msg:?}"),
    }
    for part in split_list(s) {
        let _ = parse(&part);
    }
});
