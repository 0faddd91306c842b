//! The command line contract: errors get one line on stderr and the pinned exit code, output
//! goes where a Unix tool puts it, and every pinned code comes from its situation. The full
//! bad-input table is in bad_input.rs.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::common::redis::RedisServer;
use crate::common::*;

/// Bad input: exit 64, one line on stderr, no panic, nothing on stdout.
#[track_caller]
fn usage_error(env: &Env, args: &[&str]) -> String {
    let o = env.run(args);
    let err = stderr(&o);
    assert_code(&o, 64);
    assert_eq!(err.lines().count(), 1, "{args:?} said:\n{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(stdout(&o).is_empty(), "{args:?}");
    err
}

#[test]
fn usage_errors_say_how_to_fix_them() {
    let env = Env::file();
    assert!(usage_error(&env, &["lock", "a", "--ttl", "soon"]).contains("30s"));
    assert!(usage_error(&env, &["--store", "memcached://h", "list"]).contains("redis://"));
    assert!(usage_error(&env, &["lock", "a", "--frob"]).contains("--help"));
}

#[test]
fn passwords_never_appear_in_messages() {
    let env = Env::file();
    let o = env.run(&["--store", "redis://u:hunter2@127.0.0.1:1", "lock", "a"]);
    assert_code(&o, 69);
    assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));
    let o = env.run(&["--store", "bogus://u:hunter2@h", "lock", "a"]);
    assert_code(&o, 64);
    assert!(!stderr(&o).contains("hunter2"), "{}", stderr(&o));
}

#[test]
fn environment_variables_stand_in_for_flags() {
    let redis = RedisServer::start();
    let env = Env::file();
    let mut c = env.cmd();
    c.args(["lock", "a"])
        .env("DLOCK_STORE", redis.url())
        .env("DLOCK_TTL", "7s")
        .env("DLOCK_NAMESPACE", "ns1");
    let o = output_within(c, std::time::Duration::from_secs(30));
    assert_code(&o, 0);
    let on_redis = Env::with_stores(vec![redis.url()]);
    let v: serde_json::Value = serde_json::from_str(&stdout(&on_redis.run(&[
        "--json",
        "--namespace",
        "ns1",
        "inspect",
        "a",
    ])))
    .unwrap();
    assert_eq!(v["held"], true);
    assert!(v["holders"][0]["ttl_left_ms"].as_u64().unwrap() <= 7000);
    let mut bad = env.cmd();
    bad.args(["lock", "b"]).env("DLOCK_TTL", "often");
    assert_code(&output_within(bad, std::time::Duration::from_secs(30)), 64);
}

#[test]
fn unreachable_store_is_69_and_wrong_password_is_77() {
    let env = Env::file();
    let o = env.run(&["--store", "redis://127.0.0.1:1", "lock", "a"]);
    assert_code(&o, 69);
    assert_eq!(stderr(&o).lines().count(), 1);
    let redis = RedisServer::start_with(&["--requirepass", "right"]);
    let url = format!("redis://:wrong@127.0.0.1:{}", redis.port);
    let o = env.run(&["--store", &url, "lock", "a"]);
    assert_code(&o, 77);
    assert!(stderr(&o).contains("password"), "{}", stderr(&o));
    // Reads too: a refusal is 77 whichever command met it.
    for read in [&["inspect", "a"][..], &["list"]] {
        let o = env.run(&[&["--store", url.as_str()][..], read].concat());
        assert_code(&o, 77);
        assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    }
    let good = format!("redis://:right@127.0.0.1:{}", redis.port);
    assert_code(&env.run(&["--store", &good, "lock", "a"]), 0);
    // The password may come from a file instead, out of `ps`.
    let pw = env.path("pw");
    std::fs::write(&pw, "right\n").unwrap();
    let from_file = format!(
        "redis://127.0.0.1:{}?password_file={}",
        redis.port,
        pw.display()
    );
    assert_code(&env.run(&["--store", &from_file, "lock", "b"]), 0);
}

#[test]
fn busy_is_75_and_dash_e_replaces_it() {
    let env = Env::file();
    assert_code(&env.run(&["lock", "a"]), 0);
    assert_code(&env.run(&["lock", "a", "-n"]), 75);
    assert_code(&env.run(&["lock", "a", "-n", "-E", "3"]), 3);
    assert_code(&env.run(&["run", "a", "-n", "-E", "0", "--", "false"]), 0);
    let start = std::time::Instant::now();
    assert_code(&env.run(&["run", "a", "-w", "300ms", "--", "true"]), 75);
    assert!(start.elapsed() >= std::time::Duration::from_millis(300));
}

#[test]
fn every_command_speaks_json() {
    let env = Env::file();
    let json = |args: &[&str]| -> serde_json::Value {
        let mut full = vec!["--json"];
        full.extend_from_slice(args);
        let o = env.run(&full);
        assert_code(&o, 0);
        serde_json::from_str(&stdout(&o))
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&o)))
    };
    let lock = json(&["lock", "a", "--ttl", "20s"]);
    let token = lock["token"].as_str().unwrap().to_string();
    // Fences start at the store's clock floor (microseconds since 2020), not at 1.
    assert!(lock["fence"].as_u64().is_some_and(|f| f > 0), "{lock}");
    assert_eq!(lock["name"], "a");
    assert_eq!(json(&["extend", "a", "--token", &token])["name"], "a");
    let inspect = json(&["inspect", "a"]);
    assert_eq!(inspect["held"], true);
    assert_eq!(inspect["holders"][0]["mode"], "exclusive");
    assert_eq!(json(&["list"])["locks"][0]["name"], "a");
    assert_eq!(json(&["unlock", "a", "--token", &token])["released"], true);
    assert_eq!(json(&["multilock", "x", "y"])["names"][1], "y");
}

#[test]
fn list_prints_a_header_and_one_line_per_held_name() {
    let env = Env::file();
    for n in ["app/a", "app/b", "other"] {
        assert_code(&env.run(&["lock", n]), 0);
    }
    assert_eq!(listed(&env, "app/"), ["app/a", "app/b"]);
    let text = stdout(&env.run(&["list"]));
    assert_eq!(text.lines().count(), 4, "{text}");
}

#[test]
fn colour_only_when_asked_and_never_with_no_color() {
    let env = Env::file();
    assert_code(&env.run(&["lock", "a"]), 0);
    let plain = env.run(&["inspect", "a"]);
    assert!(!stdout(&plain).contains('\x1b'), "colour on a pipe");
    let forced = env.run(&["--color", "always", "inspect", "a"]);
    assert!(stdout(&forced).contains('\x1b'));
    let mut c = env.cmd();
    c.args(["--color", "always", "inspect", "a"])
        .env("NO_COLOR", "1");
    assert!(!stdout(&output_within(c, std::time::Duration::from_secs(30))).contains('\x1b'));
}

#[test]
fn a_closed_stdout_is_not_a_panic() {
    let env = Env::file();
    let mut c = env.cmd();
    c.args(["completions", "bash"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    drop(child.stdout.take());
    let status = wait_child(&mut child, std::time::Duration::from_secs(10)).unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!err.contains("panicked"), "{err}");
    assert!(status.success(), "{status:?} {err}");
}

#[test]
fn help_and_version_exit_0() {
    let env = Env::file();
    let h = env.run(&["--help"]);
    assert_code(&h, 0);
    assert!(stdout(&h).contains("multilock"));
    let v = env.run(&["--version"]);
    assert_code(&v, 0);
    assert!(stdout(&v).starts_with("dlock "));
}

#[test]
fn unlock_force_releases_anyone_and_a_stale_token_changes_nothing() {
    let env = Env::file();
    let t = stdout(&env.run(&["lock", "a"]));
    assert_code(
        &env.run(&["unlock", "a", "--token", "0123456789abcdef0123456789abcdef"]),
        1,
    );
    assert_code(
        &env.run(&["extend", "a", "--token", "0123456789abcdef0123456789abcdef"]),
        1,
    );
    assert_code(&env.run(&["lock", "a", "-n"]), 75);
    assert_code(&env.run(&["unlock", "a", "--force"]), 0);
    assert_code(&env.run(&["unlock", "a", "--token", &t]), 1);
    assert_code(&env.run(&["lock", "a", "-n"]), 0);
}

#[test]
fn a_lock_taken_with_a_ttl_expires_and_extend_pushes_it_out() {
    let env = Env::file();
    let t = stdout(&env.run(&["lock", "a", "--ttl", "400ms"]));
    assert_code(&env.run(&["extend", "a", "--token", &t, "--ttl", "2s"]), 0);
    // Past the first deadline (time itself is what is tested): still held.
    std::thread::sleep(std::time::Duration::from_millis(600));
    assert_code(&env.run(&["lock", "a", "-n"]), 75);
    let t2 = stdout(&env.run(&["lock", "b", "--ttl", "300ms"]));
    assert!(wait_for(Duration::from_secs(10), || !env.held("b")));
    assert_code(&env.run(&["extend", "b", "--token", &t2]), 1);
    let o = env.run(&["run", "b", "-n", "--", "sh", "-c", "echo $DLOCK_PREVIOUS"]);
    assert_eq!(stdout(&o), "expired");
}

/// A process under libfaketime sees a monotonic (and boot) clock that is not the kernel's;
/// timed on it, a lease would be judged expired or alive at will. It is refused, and the
/// lease an honest client holds is left as it was.
#[test]
fn a_client_with_a_faked_clock_is_refused_and_an_existing_lease_stays() {
    let env = Env::file();
    let o = env.run(&["--json", "lock", "job"]);
    assert_code(&o, 0);
    let fence = serde_json::from_str::<serde_json::Value>(&stdout(&o)).unwrap()["fence"].clone();
    for offset in ["-1h", "+1h", "+0"] {
        for args in [
            &["lock", "job", "-n"][..],
            &["run", "job", "-n", "--", "true"][..],
        ] {
            let mut c = env.cmd();
            c.args(args)
                .env("LD_PRELOAD", libfaketime())
                .env("FAKETIME", offset);
            let o = output_within(c, std::time::Duration::from_secs(30));
            // EX_CONFIG: as set up, this process can never time a lease.
            assert_code(&o, 78);
            let err = stderr(&o);
            assert_eq!(err.lines().count(), 1, "{err}");
            assert!(err.contains("clock"), "{err}");
            // In plain units, with where faketime belongs instead.
            assert!(!err.contains("year"), "{err}");
            assert!(err.contains("dlock run NAME -- faketime"), "{err}");
        }
    }
    let v: serde_json::Value =
        serde_json::from_str(&stdout(&env.run(&["--json", "inspect", "job"]))).unwrap();
    assert_eq!(v["held"], true);
    assert_eq!(v["holders"][0]["fence"], fence);
    assert!(v["holders"][0]["ttl_left_ms"].as_u64().unwrap() <= 30_000);
}

/// A clock stepped back an hour mid-run stalls dlock's timers (renewals included): the
/// watchdog, on the kernel's clock, stops the command before the lease runs out, and dlock
/// says the lock was lost (70) rather than passing on the command's death by SIGTERM (143).
#[test]
fn a_clock_stepped_back_mid_run_ends_the_run_with_70() {
    let env = Env::file();
    let file = env.path("faketime");
    std::fs::write(&file, format!("{:.3}\n", honest_offset())).unwrap();
    let mut c = env.cmd();
    c.args(["run", "job", "--ttl", "1s", "--", "sleep", "5"])
        .env("LD_PRELOAD", libfaketime())
        .env("FAKETIME_TIMESTAMP_FILE", &file)
        .env("FAKETIME_NO_CACHE", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = c.spawn().unwrap();
    assert!(wait_for(
        Duration::from_secs(10),
        || env.inspect("job")["held"] == true
    ));
    let start = Instant::now();
    std::fs::write(&file, format!("{:.3}\n", honest_offset() - 3600.0)).unwrap();
    let o = finish(child, Duration::from_secs(20));
    assert_code(&o, 70);
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
}

/// A server with a password hangs up on an unauthenticated client's first long command with
/// a protocol error instead of NOAUTH; that is still a refusal (77), not an outage (69).
#[test]
fn a_missing_password_is_77_not_69() {
    let redis = RedisServer::start_with(&["--requirepass", "right"]);
    let env = Env::with_stores(vec![redis.url()]);
    for args in [&["lock", "a"][..], &["run", "a", "--", "true"][..]] {
        let o = env.run(args);
        assert_code(&o, 77);
        assert!(stderr(&o).contains("password"), "{}", stderr(&o));
    }
}

/// `dlock help CMD` is `dlock CMD --help`, as git and cargo take it; `dlock help` alone is
/// `dlock --help`, and an unknown command is a usage error.
#[test]
fn help_names_a_command() {
    let env = Env::file();
    for cmd in ["run", "lock", "inspect", "shards"] {
        let o = env.run(&["help", cmd]);
        assert_code(&o, 0);
        assert_eq!(stdout(&o), stdout(&env.run(&[cmd, "--help"])), "{cmd}");
        assert!(stdout(&o).contains(&format!("Usage: dlock {cmd}")), "{cmd}");
    }
    assert_eq!(stdout(&env.run(&["help"])), stdout(&env.run(&["--help"])));
    let o = env.run(&["help", "nosuch"]);
    assert_code(&o, 64);
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
}
