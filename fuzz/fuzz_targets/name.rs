//! Lock names end up in Redis keys, file names and ZooKeeper paths: whatever parse_name
//! accepts stays within the alphabet and length, and can never climb out of a directory.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(name) = dlock::names::parse_name(s) {
        assert_eq!(name, s);
        assert!(!name.is_empty() && name.len() <= dlock::names::MAX_NAME);
        assert!(
            name.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"._-@+=:/".contains(&b)),
            "{name:?}"
        );
        assert!(!name.starts_with(['/', '.', '-']), "{name:?}");
        assert!(
            !name.split('/').any(|p| p == ".." || p.is_empty()),
            "{name:?}"
        );
    }
    let _ = dlock::names::parse_namespace(s);
    let _ = dlock::names::parse_prefix(s);
});
