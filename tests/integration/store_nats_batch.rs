//! A NATS multi-name grant is one atomic batch: a `multilock` killed after its first record
//! reached the server, before its last, holds none of its names (the server never commits
//! a batch without its last message), so the next one gets them at once.

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use crate::common::nats::NatsServer;
use crate::common::*;

/// A proxy to the server that passes dlock's messages until the first write of a record of
/// the bucket `locks` (`$KV.locks.NS.r.NAME`), passes that one whole, then kills dlock
/// (`victim`) and passes nothing more: dlock dies between its first record and its last.
struct Cut {
    port: u16,
    victim: Arc<AtomicU32>,
    done: Arc<AtomicBool>,
}

impl Cut {
    fn start(server: u16) -> Cut {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let victim = Arc::new(AtomicU32::new(0));
        let done = Arc::new(AtomicBool::new(false));
        let (v, d) = (victim.clone(), done.clone());
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let upstream = TcpStream::connect(("127.0.0.1", server)).unwrap();
                let (v, d) = (v.clone(), d.clone());
                std::thread::spawn(move || pass(client, upstream, &v, &d));
            }
        });
        Cut { port, victim, done }
    }
}

/// One connection: the server's side passed as it comes, dlock's side op by op.
fn pass(mut client: TcpStream, mut upstream: TcpStream, victim: &AtomicU32, done: &AtomicBool) {
    let (mut back_from, mut back_to) = (upstream.try_clone().unwrap(), client.try_clone().unwrap());
    std::thread::spawn(move || {
        let _ = std::io::copy(&mut back_from, &mut back_to);
        let _ = back_to.shutdown(Shutdown::Both);
    });
    let mut pending = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        let n = match client.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        pending.extend_from_slice(&buf[..n]);
        while let Some((len, record)) = next_op(&pending) {
            if upstream.write_all(&pending[..len]).is_err() {
                return;
            }
            pending.drain(..len);
            if record {
                upstream.flush().unwrap();
                // Give the server the message before dlock goes (loopback: it is there).
                std::thread::sleep(Duration::from_millis(200));
                let pid = victim.load(Ordering::SeqCst);
                assert!(pid > 0, "dlock wrote before the test knew it");
                signal(pid, libc::SIGKILL);
                done.store(true, Ordering::SeqCst);
                let _ = upstream.shutdown(Shutdown::Both);
                let _ = client.shutdown(Shutdown::Both);
                return;
            }
        }
    }
    let _ = upstream.shutdown(Shutdown::Both);
}

/// The length of the first whole protocol op in `b`, and whether it publishes a record of
/// the bucket `locks`; None until a whole op is there.
fn next_op(b: &[u8]) -> Option<(usize, bool)> {
    let eol = b.windows(2).position(|w| w == b"\r\n")?;
    let line = String::from_utf8_lossy(&b[..eol]).to_string();
    let words: Vec<&str> = line.split_whitespace().collect();
    match words.first().copied() {
        Some("PUB") | Some("HPUB") => {
            let total: usize = words.last().unwrap().parse().unwrap();
            let len = eol + 2 + total + 2;
            let record = words[1].starts_with("$KV.locks.") && words[1].contains(".r.");
            (b.len() >= len).then_some((len, record))
        }
        _ => Some((eol + 2, false)),
    }
}

#[test]
fn a_multilock_killed_between_its_record_writes_holds_no_name() {
    let server = NatsServer::start();
    let env = Env::with_stores(vec![server.url()]);
    // The names' records exist: the grant's first record write is the grant itself.
    assert_code(&env.run(&["multilock", "m-a", "m-b", "--", "true"]), 0);
    let cut = Cut::start(server.port);
    let cut_url = format!("nats://127.0.0.1:{}/locks?create=1", cut.port);
    let mut c = Env::with_stores(vec![cut_url]).spawn(&[
        "multilock",
        "m-a",
        "m-b",
        "--ttl",
        "60s",
        "--",
        "sleep",
        "60",
    ]);
    cut.victim.store(c.id(), Ordering::SeqCst);
    let status = wait_child(&mut c, Duration::from_secs(30)).expect("dlock not killed");
    assert!(
        cut.done.load(Ordering::SeqCst),
        "dlock ended before its grant: {status:?}"
    );
    let (a, b) = (env.held("m-a"), env.held("m-b"));
    assert!(!a && !b, "held after the kill: m-a {a}, m-b {b}");
    // Nothing waits for the dead grant's ttl.
    let o = env.run(&["multilock", "m-a", "m-b", "-n", "--", "true"]);
    assert_code(&o, 0);
}
