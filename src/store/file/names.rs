//! Lock names as file names in the namespace directory.
//!
//! A name is percent-encoded (`/` and anything unusual), so no name can climb out of the
//! directory or collide with dlock's own dot-files. A valid name may be 200 bytes with about
//! a hundred `/` (issue 37), which encodes to about 400 bytes, past the 255 a file name may
//! have: such a name's file is named by its hash instead (`~` and 40 hex digits, a form no
//! encoded name takes, since `~` is always encoded), and the state file carries the name
//! itself for `list`. Shorter names keep the encoding earlier versions used, so their state
//! files are found across an upgrade.

use sha2::{Digest, Sha256};

/// The longest file name most Linux file systems take (NAME_MAX).
const NAME_MAX: usize = 255;

const SUFFIX: &str = ".json";

/// A lock name's state file name.
pub(super) fn file_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len() + 5);
    for b in name.bytes() {
        if b.is_ascii_alphanumeric() || b"._-@+=:".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    if out.len() + SUFFIX.len() > NAME_MAX {
        return format!("~{}{SUFFIX}", &hex(name.as_bytes())[..40]);
    }
    out.push_str(SUFFIX);
    out
}

/// Whether a state file is named by its name's hash (its state then tells the name).
pub(super) fn hashed(file: &str) -> bool {
    file.starts_with('~') && file.ends_with(SUFFIX)
}

/// The lock name an encoded file name stands for (None: a dot-file, a hashed name, or not a
/// state file at all).
pub(super) fn name_of(file: &str) -> Option<String> {
    let stem = file.strip_suffix(SUFFIX)?;
    if stem.starts_with(['.', '~']) {
        return None;
    }
    let mut out = Vec::new();
    let b = stem.as_bytes();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            out.push(u8::from_str_radix(stem.get(i + 1..i + 3)?, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// SHA-256 of `bytes` in lowercase hex: a standard hash, so a name's file never changes
/// between versions.
pub(super) fn hex(bytes: &[u8]) -> String {
    format!("{:x}", Sha256::digest(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_names_stay_in_the_directory_and_round_trip() {
        for name in ["deploy", "team/prod", "a:b@c+d=e", "x.y_z-1"] {
            let f = file_name(name);
            assert!(!f.contains('/'), "{f}");
            assert!(!f.starts_with('.'), "{f}");
            assert_eq!(name_of(&f).as_deref(), Some(name));
        }
        assert_eq!(name_of(".tmp"), None);
        assert_eq!(name_of(".lock"), None);
    }

    /// The longest valid names, slashes and all, fit a file name; distinct ones stay apart.
    #[test]
    fn a_long_name_with_many_slashes_fits_a_file_name() {
        let long = "a/".repeat(99) + "b";
        assert_eq!(long.len(), 199);
        let f = file_name(&long);
        assert!(
            f.len() <= NAME_MAX && hashed(&f) && name_of(&f).is_none(),
            "{f}"
        );
        assert_ne!(f, file_name(&("a/".repeat(99) + "c")));
        // Pinned: a name's file must never move between versions.
        assert_eq!(
            hex(b"abc"),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        let fits = "x".repeat(200);
        assert_eq!(name_of(&file_name(&fits)).as_deref(), Some(fits.as_str()));
    }
}
