//! Durations come from flags and DLOCK_TTL: any string parses to a duration within the bound
//! every store can represent, or is refused with a message; never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    match dlock::cli::parse_duration(s) {
        Ok(d) => assert!(d <= dlock::cli::MAX_DURATION, "{s:?} gave {d:?}"),
        Err(msg) => assert!(!msg.is_empty()),
    }
});
