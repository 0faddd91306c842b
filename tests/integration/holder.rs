//! A caller that does not get the lock (`-n`, or a wait that runs out) is told who holds it,
//! on one line as the waiting line says it: who, pid, command (quoted as a shell would), for
//! how long, when it expires, the reason and the CI job. With `--json`, the same fields.

use std::process::{Child, Stdio};
use std::time::Duration;

use crate::common::*;

/// `run nb -- sh -c 'sleep 60'` with a reason and a CI job, held once this returns.
fn holder(env: &Env) -> Child {
    let mut c = env.cmd();
    c.env("DLOCK_REASON", "nightly backup")
        .env("CI_JOB_URL", "https://ci.example/job/7")
        .args(["run", "nb", "--", "sh", "-c", "sleep 60"])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = c.spawn().unwrap();
    assert!(wait_for(
        Duration::from_secs(20),
        || env.inspect("nb")["held"] == true
    ));
    child
}

#[track_caller]
fn names_the_holder(o: &std::process::Output, pid: u32) {
    assert_code(o, 75);
    let err = stderr(o);
    assert_eq!(err.lines().count(), 1, "{err}");
    for part in [
        &format!("pid {pid} (sh -c 'sleep 60') for "),
        ", expires in ",
        ", reason: nightly backup",
        ", ci: https://ci.example/job/7",
    ] {
        assert!(err.contains(part), "{part:?} missing from: {err}");
    }
}

#[test]
fn no_wait_says_who_holds_the_lock() {
    let env = Env::file();
    let mut h = holder(&env);
    let pid = h.id();
    names_the_holder(&env.run(&["lock", "nb", "-n"]), pid);
    names_the_holder(&env.run(&["run", "nb", "-n", "--", "true"]), pid);
    names_the_holder(&env.run(&["run", "nb", "-w", "100ms", "--", "true"]), pid);
    names_the_holder(&env.run(&["wait", "nb", "-w", "0"]), pid);
    let o = env.run(&["multilock", "free", "nb", "-n"]);
    names_the_holder(&o, pid);
    assert!(stderr(&o).contains("(nb by "), "{}", stderr(&o));

    for args in [
        &["--json", "lock", "nb", "-n"][..],
        &["--json", "multilock", "free", "nb", "-n"],
        &["--json", "wait", "nb", "-w", "0"],
    ] {
        let o = env.run(args);
        assert_code(&o, 75);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: {e}: {}", stdout(&o)));
        let h = &v["holder"];
        assert_eq!(h["name"], "nb", "{v}");
        assert_eq!(h["pid"], pid, "{v}");
        assert_eq!(h["command"], "sh -c 'sleep 60'", "{v}");
        assert_eq!(h["reason"], "nightly backup", "{v}");
        assert_eq!(h["ci"], "https://ci.example/job/7", "{v}");
        assert!(
            h["held_for_ms"].is_u64() && h["expires_in_ms"].is_u64(),
            "{v}"
        );
        assert!(h["user"].is_string() && h["host"].is_string(), "{v}");
    }
    signal(pid, libc::SIGTERM);
    let _ = wait_child(&mut h, Duration::from_secs(20));
}

/// `T=$(dlock lock x)`: the lock is held by the script that asked for it, not by the `dlock
/// lock` process that has already exited. `inspect` and the busy message show the script's
/// pid and command, and, once the script is gone, that it exited (its lease may be stale).
#[test]
fn a_lock_is_shown_by_the_script_that_holds_it() {
    let env = Env::file();
    let dlock = env!("CARGO_BIN_EXE_dlock");
    let (pidfile, gate) = (env.path("pid"), env.path("gate"));
    let script = format!(
        "T=$({dlock} lock x --ttl 5m); echo $$ > {p}; i=0; \
         while [ ! -e {g} ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done",
        p = pidfile.display(),
        g = gate.display()
    );
    let mut c = env.shell(&script);
    let mut script = c.spawn().unwrap();
    assert!(wait_for(Duration::from_secs(20), || read(&pidfile)
        .trim()
        .parse::<u32>()
        .is_ok()));
    let pid: u32 = read(&pidfile).trim().parse().unwrap();
    let h = &env.inspect("x")["holders"][0];
    assert_eq!(h["pid"], pid, "{h}");
    assert_eq!(h["alive"], true, "{h}");
    assert!(
        h["meta"]["command"]
            .as_str()
            .unwrap()
            .contains("lock x --ttl 5m"),
        "{h}"
    );
    let o = env.run(&["lock", "x", "-n"]);
    assert!(
        stderr(&o).contains(&format!("pid {pid} (sh -c ")),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("(exited)"), "{}", stderr(&o));

    std::fs::write(&gate, "").unwrap();
    let _ = wait_child(&mut script, Duration::from_secs(20));
    let h = &env.inspect("x")["holders"][0];
    assert_eq!(h["pid"], pid, "{h}");
    assert_eq!(h["alive"], false, "{h}");
    let o = env.run(&["inspect", "x"]);
    assert!(
        stdout(&o).contains(&format!("pid {pid} (exited)")),
        "{}",
        stdout(&o)
    );
    let o = env.run(&["lock", "x", "-n"]);
    assert!(
        stderr(&o).contains(&format!("pid {pid} (exited)")),
        "{}",
        stderr(&o)
    );
}
