//! A fault proxy between clients and one store node: a loopback listener that forwards every
//! connection to the node, and can be switched while it runs to lose the network in the ways
//! that break locks in the field (issue 18): a partition, replies lost after the server acted,
//! delay, and resets. Run `Proxy::start` once per node and point the clients at its port.
//!
//! It runs on a thread of its own (a current-thread tokio runtime), so the synchronous tests
//! and the checker drive it with plain calls. Bytes are never dropped from the middle of a
//! stream that then goes on, which no network does: a partition holds them (as TCP would
//! retransmit them) and a connection that lost replies is reset once replies flow again.

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::{mpsc, oneshot, watch};
use tokio::time::{Instant, sleep_until};

/// What the proxy does to the traffic, from the moment it is set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways.
    Pass,
    /// A partition: connections are accepted but nothing goes either way, not even a
    /// connection to the node; what was sent is held, and goes on if the partition heals.
    Blackhole,
    /// Requests reach the node (it acts on them), replies are thrown away. A connection that
    /// lost a reply is reset when this mode ends.
    DropReplies,
    /// Each chunk is forwarded this long after it arrived, each way.
    Delay(Duration),
    /// Every connection is reset, and new ones are refused (nothing listens on the port).
    Reset,
}

pub struct Proxy {
    pub port: u16,
    mode: watch::Sender<Mode>,
    /// What clients sent, from `record` on (off by default: the checker runs for minutes).
    sent: Arc<Recording>,
    stop: Option<oneshot::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Proxy {
    /// Listen on a free loopback port and forward to `target` (in `Mode::Pass`).
    pub fn start(target: SocketAddr) -> Proxy {
        let listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).expect("bind");
        let port = listener.local_addr().unwrap().port();
        listener.set_nonblocking(true).unwrap();
        let (mode, rx) = watch::channel(Mode::Pass);
        let (stop, stopped) = oneshot::channel();
        let sent = Arc::new(Recording::default());
        let recording = sent.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).unwrap();
                tokio::select! {
                    _ = listen(listener, port, target, rx, recording) => {}
                    _ = stopped => {}
                }
            });
            // Dropping the runtime drops every connection the proxy still holds.
        });
        Proxy {
            port,
            mode,
            sent,
            stop: Some(stop),
            thread: Some(thread),
        }
    }

    /// Forward to a node on loopback.
    pub fn to_port(port: u16) -> Proxy {
        Proxy::start(SocketAddr::from((Ipv4Addr::LOCALHOST, port)))
    }

    /// `127.0.0.1:PORT`, for a store URL.
    pub fn addr(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Keep what clients send from now on (see `sent`), dropping what was kept before.
    pub fn record(&self) {
        self.sent.bytes.lock().unwrap().clear();
        self.sent.on.store(true, Ordering::SeqCst);
    }

    /// What clients sent since `record`, in the order the proxy passed it on.
    pub fn recorded(&self) -> Vec<u8> {
        self.sent.bytes.lock().unwrap().clone()
    }

    /// How many times `needle` occurs in what clients sent since `record`.
    pub fn sent(&self, needle: &str) -> usize {
        let bytes = self.sent.bytes.lock().unwrap();
        bytes
            .windows(needle.len())
            .filter(|w| *w == needle.as_bytes())
            .count()
    }
}

/// The bytes clients sent, while `on`.
#[derive(Default)]
struct Recording {
    on: AtomicBool,
    bytes: Mutex<Vec<u8>>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Accept while not in `Reset`; in `Reset` the listener is closed, so connecting is refused
/// as by a node that is down, and it listens on the same port again afterwards.
async fn listen(
    first: TcpListener,
    port: u16,
    target: SocketAddr,
    mode: watch::Receiver<Mode>,
    sent: Arc<Recording>,
) {
    let mut watch = mode.clone();
    let mut listener = Some(first);
    loop {
        let l = match listener.take() {
            Some(l) => l,
            None => {
                let _ = watch.wait_for(|m| *m != Mode::Reset).await;
                rebind(port).await
            }
        };
        loop {
            tokio::select! {
                accepted = l.accept() => {
                    if let Ok((client, _)) = accepted {
                        tokio::spawn(serve(client, target, mode.clone(), sent.clone()));
                    }
                }
                _ = watch.wait_for(|m| *m == Mode::Reset) => break,
            }
        }
    }
}

/// The proxy's own port again (another socket may hold it for a moment: retry).
async fn rebind(port: u16) -> TcpListener {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let give_up = Instant::now() + Duration::from_secs(10);
    loop {
        let bound = TcpSocket::new_v4().and_then(|s| {
            s.set_reuseaddr(true)?;
            s.bind(addr)?;
            s.listen(1024)
        });
        match bound {
            Ok(l) => return l,
            Err(e) if Instant::now() > give_up => {
                panic!("proxy cannot listen on {addr} again: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(20)).await,
        }
    }
}

/// One client connection, forwarded both ways under the mode in force.
async fn serve(
    mut client: TcpStream,
    target: SocketAddr,
    mode: watch::Receiver<Mode>,
    sent: Arc<Recording>,
) {
    let mut m = mode.clone();
    // Across a partition not even the connection reaches the node.
    let ready = m.wait_for(|m| *m != Mode::Blackhole).await.map(|m| *m);
    if !matches!(ready, Ok(m) if m != Mode::Reset) {
        return abort(&client);
    }
    let Ok(mut server) = TcpStream::connect(target).await else {
        return abort(&client);
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let lost_reply = AtomicBool::new(false);
    {
        let (cr, cw) = client.split();
        let (sr, sw) = server.split();
        let up = pump(cr, sw, Some(&sent), mode.clone(), &lost_reply);
        let down = pump(sr, cw, None, mode.clone(), &lost_reply);
        tokio::select! {
            _ = futures_util::future::join(up, down) => return,
            _ = broken(mode, &lost_reply) => {}
        }
    }
    abort(&client);
    abort(&server);
}

/// Until the connection must be reset: `Reset`, or replies flow again after some were lost.
async fn broken(mut mode: watch::Receiver<Mode>, lost_reply: &AtomicBool) {
    loop {
        let m = *mode.borrow_and_update();
        if m == Mode::Reset || (m != Mode::DropReplies && lost_reply.load(Ordering::SeqCst)) {
            return;
        }
        if mode.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

/// Close with a reset (RST), not an orderly close: what a peer sees when the path breaks.
fn abort(s: &TcpStream) {
    let _ = s.set_zero_linger();
}

/// One direction: a reader that keeps reading (so a delay does not pile up behind one
/// chunk) and a writer that forwards each chunk when and if the mode lets it. Requests (the
/// clients' side) come with the recording they go to; replies with none.
async fn pump(
    mut from: tokio::net::tcp::ReadHalf<'_>,
    mut to: tokio::net::tcp::WriteHalf<'_>,
    requests: Option<&Recording>,
    mode: watch::Receiver<Mode>,
    lost_reply: &AtomicBool,
) {
    let reply = requests.is_none();
    let (tx, mut rx) = mpsc::channel::<(Instant, Vec<u8>)>(64);
    let mut rmode = mode.clone();
    let read = async move {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            // Nothing is read across a partition: the sender's buffers fill, as they would.
            if rmode.wait_for(|m| *m != Mode::Blackhole).await.is_err() {
                return;
            }
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if let Some(r) = requests.filter(|r| r.on.load(Ordering::SeqCst)) {
                r.bytes.lock().unwrap().extend_from_slice(&buf[..n]);
            }
            if tx.send((Instant::now(), buf[..n].to_vec())).await.is_err() {
                return;
            }
        }
    };
    let mut wmode = mode;
    let write = async move {
        while let Some((at, chunk)) = rx.recv().await {
            loop {
                let m = *wmode.borrow_and_update();
                match m {
                    Mode::Blackhole => {}
                    Mode::Reset => return,
                    Mode::DropReplies if reply => {
                        lost_reply.store(true, Ordering::SeqCst);
                        break;
                    }
                    Mode::Delay(d) if Instant::now() < at + d => {
                        tokio::select! {
                            _ = sleep_until(at + d) => continue,
                            _ = wmode.changed() => continue,
                        }
                    }
                    _ => {
                        if to.write_all(&chunk).await.is_err() {
                            return;
                        }
                        break;
                    }
                }
                // Held until the mode changes.
                if wmode.changed().await.is_err() {
                    return;
                }
            }
        }
        // The sender closed its side: pass the close on.
        let _ = to.shutdown().await;
    };
    futures_util::future::join(read, write).await;
}
