//! The fault proxy of `tests/common/proxy.rs` itself: each mode does what the checker relies
//! on, against a small echo server that records what reached it and against a real Redis.

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::common::proxy::{Mode, Proxy};
use crate::common::redis::RedisServer;
use crate::common::wait_for;

/// How long "nothing came" is watched for.
const QUIET: Duration = Duration::from_millis(500);
const LONG: Duration = Duration::from_secs(5);

/// An echo server that records every byte that reached it and counts its connections.
struct Echo {
    port: u16,
    got: Arc<Mutex<Vec<u8>>>,
    connections: Arc<AtomicUsize>,
}

impl Echo {
    fn start() -> Echo {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        let got = Arc::new(Mutex::new(Vec::new()));
        let connections = Arc::new(AtomicUsize::new(0));
        let (g, n) = (got.clone(), connections.clone());
        std::thread::spawn(move || {
            for mut s in l.incoming().flatten() {
                n.fetch_add(1, Ordering::SeqCst);
                let g = g.clone();
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(k) = s.read(&mut buf) {
                        if k == 0 {
                            break;
                        }
                        g.lock().unwrap().extend_from_slice(&buf[..k]);
                        if s.write_all(&buf[..k]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        Echo {
            port,
            got,
            connections,
        }
    }

    fn got(&self, what: &str) -> bool {
        String::from_utf8_lossy(&self.got.lock().unwrap()).contains(what)
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

fn connect(p: &Proxy) -> TcpStream {
    let s = TcpStream::connect(p.addr()).unwrap();
    s.set_nodelay(true).unwrap();
    s
}

/// What arrives within `limit`: `None` if nothing did, empty on end of stream, and
/// `Some(Err)` when the connection was reset.
fn read_within(s: &mut TcpStream, limit: Duration) -> Option<std::io::Result<Vec<u8>>> {
    s.set_read_timeout(Some(limit)).unwrap();
    let mut buf = [0u8; 1024];
    match s.read(&mut buf) {
        Ok(n) => Some(Ok(buf[..n].to_vec())),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => None,
        Err(e) => Some(Err(e)),
    }
}

/// Send `line` and expect it back within `limit`.
fn round_trip(s: &mut TcpStream, line: &str, limit: Duration) {
    s.write_all(line.as_bytes()).unwrap();
    let back = read_within(s, limit)
        .expect("no answer")
        .expect("connection broken");
    assert_eq!(String::from_utf8_lossy(&back), line);
}

/// A connection that was reset (or closed): reading ends in an error or end of stream.
fn assert_closed(s: &mut TcpStream) {
    match read_within(s, LONG) {
        Some(Err(_)) => {}
        Some(Ok(b)) if b.is_empty() => {}
        other => panic!("the connection was not closed: {other:?}"),
    }
}

#[test]
fn pass_forwards_and_a_blackhole_holds_everything_until_it_heals() {
    let echo = Echo::start();
    let p = Proxy::to_port(echo.port);
    let mut c = connect(&p);
    round_trip(&mut c, "one", LONG);
    assert_eq!(echo.connections(), 1);

    p.set(Mode::Blackhole);
    c.write_all(b"two").unwrap();
    assert!(read_within(&mut c, QUIET).is_none(), "an answer crossed");
    assert!(!echo.got("two"), "a request crossed");
    // A connection made across the partition is accepted, but does not reach the node.
    let mut late = connect(&p);
    late.write_all(b"three").unwrap();
    assert!(read_within(&mut late, QUIET).is_none());
    assert_eq!(echo.connections(), 1, "a connection crossed");

    // Healed: what was held goes on, as TCP would retransmit it.
    p.set(Mode::Pass);
    assert_eq!(read_within(&mut c, LONG).unwrap().unwrap(), b"two");
    assert_eq!(read_within(&mut late, LONG).unwrap().unwrap(), b"three");
    assert_eq!(echo.connections(), 2);
}

#[test]
fn dropped_replies_reach_the_node_and_the_connection_is_reset_afterwards() {
    let echo = Echo::start();
    let p = Proxy::to_port(echo.port);
    let mut c = connect(&p);
    round_trip(&mut c, "one", LONG);

    p.set(Mode::DropReplies);
    c.write_all(b"lost").unwrap();
    assert!(wait_for(LONG, || echo.got("lost")), "the request was lost");
    assert!(read_within(&mut c, QUIET).is_none(), "the reply crossed");
    // Connections made meanwhile reach the node too.
    let mut other = connect(&p);
    other.write_all(b"also").unwrap();
    assert!(wait_for(LONG, || echo.got("also")));
    // (Its answer is dropped only if the proxy sees it before replies flow again.)
    assert!(
        read_within(&mut other, QUIET).is_none(),
        "the reply crossed"
    );

    // The stream lost bytes, so it cannot go on: it is reset once replies flow again.
    p.set(Mode::Pass);
    assert_closed(&mut c);
    assert_closed(&mut other);
    round_trip(&mut connect(&p), "fresh", LONG);
}

#[test]
fn a_delay_holds_each_chunk_that_long_each_way() {
    let echo = Echo::start();
    let p = Proxy::to_port(echo.port);
    let d = Duration::from_millis(300);
    p.set(Mode::Delay(d));
    let mut c = connect(&p);
    let sent = Instant::now();
    c.write_all(b"slow").unwrap();
    std::thread::sleep(d / 2);
    assert!(!echo.got("slow"), "the request was not delayed");
    assert!(wait_for(LONG, || echo.got("slow")));
    assert_eq!(read_within(&mut c, LONG).unwrap().unwrap(), b"slow");
    let took = sent.elapsed();
    assert!(
        took >= 2 * d,
        "a round trip took {took:?}, under twice {d:?}"
    );
    // Back to no delay: the same connection goes on.
    p.set(Mode::Pass);
    round_trip(&mut c, "quick", LONG);
}

#[test]
fn a_reset_closes_every_connection_and_refuses_new_ones_until_it_ends() {
    let echo = Echo::start();
    let p = Proxy::to_port(echo.port);
    let mut c = connect(&p);
    round_trip(&mut c, "one", LONG);

    p.set(Mode::Reset);
    assert_closed(&mut c);
    assert!(
        wait_for(LONG, || TcpStream::connect(p.addr())
            .is_err_and(|e| e.kind() == ErrorKind::ConnectionRefused)),
        "new connections were not refused"
    );

    p.set(Mode::Pass);
    assert!(wait_for(LONG, || TcpStream::connect(p.addr()).is_ok()));
    round_trip(&mut connect(&p), "two", LONG);
}

/// RESP inline commands to a real Redis through the proxy: a partition holds a write (the
/// server does not apply it until it heals), lost replies leave a write applied unheard.
#[test]
fn on_redis_a_partition_holds_writes_and_lost_replies_leave_them_applied() {
    let redis = RedisServer::start();
    let p = Proxy::to_port(redis.port);
    let mut c = connect(&p);
    c.write_all(b"PING\r\n").unwrap();
    assert_eq!(read_within(&mut c, LONG).unwrap().unwrap(), b"+PONG\r\n");

    p.set(Mode::Blackhole);
    c.write_all(b"SET held 1\r\n").unwrap();
    assert!(read_within(&mut c, QUIET).is_none());
    assert_eq!(
        redis.cmd("EXISTS held"),
        ":0",
        "the write crossed the partition"
    );
    p.set(Mode::Pass);
    assert_eq!(read_within(&mut c, LONG).unwrap().unwrap(), b"+OK\r\n");
    assert_eq!(redis.cmd("EXISTS held"), ":1");

    p.set(Mode::DropReplies);
    c.write_all(b"SET unheard 1\r\n").unwrap();
    assert!(wait_for(LONG, || redis.cmd("EXISTS unheard") == ":1"));
    assert!(read_within(&mut c, QUIET).is_none(), "the reply crossed");
}
