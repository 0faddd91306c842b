//! The `sharded` setup (issue 15): three shards of one Redis server each. Clients loop
//! `dlock --shard ... run NAME` over names spread on all three; no two sections of one name
//! may overlap. Then the server of one shard is stopped: names on the other shards keep
//! working (exit 0), names on the stopped one give exit 69.

use std::process::{Output, Stdio};
use std::thread;
use std::time::Duration;

use crate::common::redis::RedisServer;
use crate::common::{Env, assert_sections, critical_section, output_within};

fn dlock(env: &Env, shards: &[String], args: &[&str]) -> Output {
    let mut c = env.cmd();
    c.args(shards).args(args);
    output_within(c, Duration::from_secs(120))
}

/// Run the setup; the one summary line and whether it passed.
pub fn run(clients: usize, sections: usize) -> (String, bool) {
    let mut servers: Vec<RedisServer> = (0..3).map(|_| RedisServer::start()).collect();
    let shards: Vec<String> = servers
        .iter()
        .flat_map(|s| ["--shard".to_string(), s.url()])
        .collect();
    let env = Env::file();
    let names: Vec<String> = (0..6).map(|i| format!("sharded-{i}")).collect();
    let per_client = sections.div_ceil(clients).max(1);
    thread::scope(|scope| {
        for c in 0..clients {
            let (env, shards, names) = (&env, &shards, &names);
            scope.spawn(move || {
                for round in 0..per_client {
                    let name = &names[(c + round) % names.len()];
                    let log = env.path(&format!("{name}.log"));
                    let script = critical_section(&log, 2);
                    let mut cmd = env.cmd();
                    cmd.args(shards)
                        .args(["run", name, "--ttl", "2s", "-w", "60s"])
                        .args(["--", "sh", "-c", &script])
                        .stdout(Stdio::null())
                        .stderr(Stdio::null());
                    let o = output_within(cmd, Duration::from_secs(120));
                    assert!(o.status.success(), "dlock run {name}: {:?}", o.status);
                }
            });
        }
    });
    let total = per_client * clients;
    let mut entered = 0;
    for name in &names {
        let log = std::fs::read_to_string(env.path(&format!("{name}.log"))).unwrap_or_default();
        let n = log.lines().count() / 2;
        assert_sections(&log, n);
        entered += n;
    }
    // Which shard (and server) each name is on, as inspect says.
    let place = |name: &str| -> (u64, String) {
        let o = dlock(&env, &shards, &["--json", "inspect", name]);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let shard = &v["shard"];
        (
            shard["shard"].as_u64().unwrap(),
            shard["stores"].as_str().unwrap().to_string(),
        )
    };
    let placed: Vec<(u64, String)> = names.iter().map(|n| place(n)).collect();
    let (_, label) = placed[0].clone();
    let down = servers
        .iter()
        .position(|s| label.contains(&format!(":{}", s.port)))
        .expect("the shard's server");
    servers[down].kill();
    let (mut kept, mut stopped, mut wrong) = (0, 0, Vec::new());
    for (name, (_, l)) in names.iter().zip(&placed) {
        let o = dlock(
            &env,
            &shards,
            &["--store-timeout", "300ms", "run", name, "--", "true"],
        );
        let want = if *l == label { 69 } else { 0 };
        match o.status.code() {
            Some(c) if c == want && c == 0 => kept += 1,
            Some(c) if c == want => stopped += 1,
            other => wrong.push(format!("{name}: {other:?}, want {want}")),
        }
    }
    let ok = entered == total && wrong.is_empty();
    let line = format!(
        "setup=sharded shards=3 clients={clients} sections={entered}/{total} overlaps=0 \
         shard-down: {kept} name(s) kept working, {stopped} gave 69{}",
        if wrong.is_empty() {
            String::new()
        } else {
            format!(" wrong: {}", wrong.join("; "))
        }
    );
    (line, ok)
}
